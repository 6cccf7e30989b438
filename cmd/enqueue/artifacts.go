package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
)

func (a *app) newArtifactsCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "artifacts ID --out DIR",
		Short: "Download a job's plots and output files",
		Long: `Download every artifact listed in job ID's Result into DIR, keeping their
names (plots/plot-001.png, out/data.csv, ...). S3 artifacts are fetched
through the presigned URLs in the Result, so no storage credentials are
needed; local-store artifacts are copied from their paths. Prints one line
per file written.

Exit status: 0 when every artifact was written; 1 when some could not be;
2 if the job is unknown or Redis cannot be reached.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.getResult(cmd, args[0])
			if err != nil {
				return err
			}
			var failed int
			for _, art := range r.Artifacts {
				dst, err := download(cmd.Context(), art, out)
				if err != nil {
					failed++
					fmt.Fprintf(a.stderr, "enqueue: %s: %v\n", art.Name, err)
					continue
				}
				fmt.Fprintln(a.stdout, dst)
			}
			for _, e := range r.ArtifactErrors {
				fmt.Fprintf(a.stderr, "enqueue: not stored by the worker: %s\n", e)
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d artifacts not written", failed, len(r.Artifacts))}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", ".", "directory to write into (created if missing)")
	return cmd
}

// download writes one artifact under dir and returns its path. Names that
// would leave dir are refused.
func download(ctx context.Context, art jobs.Artifact, dir string) (string, error) {
	if !filepath.IsLocal(filepath.FromSlash(art.Name)) {
		return "", fmt.Errorf("name %q would leave %s", art.Name, dir)
	}
	dst := filepath.Join(dir, filepath.FromSlash(art.Name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	// The operator's tool: a local-store artifact is read by its path
	// wherever it is (regular files only).
	src, err := media.Open(ctx, art.URL, "/")
	if err != nil {
		return "", err
	}
	defer src.Close()
	f, err := os.Create(dst)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != art.Size {
		err = fmt.Errorf("got %d bytes, the result says %d", n, art.Size)
	}
	if err != nil {
		os.Remove(dst)
		return "", err
	}
	return dst, nil
}
