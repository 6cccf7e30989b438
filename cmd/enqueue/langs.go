package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

type langsFlags struct {
	json        bool
	noVersions  bool
	backend     string
	podmanURI   string
	imagePrefix string
}

// langInfo is one line of `enqueue langs`.
type langInfo struct {
	langs.Info
	Image string `json:"image"`
	// Error says why the version could not be read (image missing, engine
	// unreachable); Version is then empty.
	Error string `json:"error,omitempty"`
}

func (a *app) newLangsCmd() *cobra.Command {
	f := &langsFlags{}
	cmd := &cobra.Command{
		Use:   "langs",
		Short: "List the languages, their aliases, library installers and toolchain versions",
		Long: `List every language sandq runs, with the names a job may use for it, the
package manager that installs its libraries, and the version of its
toolchain, read from the language's image: its version command runs in a
sandbox container of that image (no network, job uid), on the engine given by
--backend, exactly as a worker would start it. With --no-versions, no
engine is contacted.

Exit status: 0 when every version was read (or --no-versions); 1 when an
image is missing or the engine cannot be reached (the list is still
printed, with the reason per language).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.langs(cmd, f) },
	}
	getenv := a.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print a JSON array")
	fl.BoolVar(&f.noVersions, "no-versions", false, "list names only; do not contact a container engine")
	fl.StringVar(&f.backend, "backend", cmp.Or(getenv("SANDQ_BACKEND"), "docker"), "container engine: docker or podman (env SANDQ_BACKEND)")
	fl.StringVar(&f.podmanURI, "podman-uri", getenv("SANDQ_PODMAN_URI"), "address of the podman system service (env SANDQ_PODMAN_URI)")
	fl.StringVar(&f.imagePrefix, "image-prefix", cmp.Or(getenv("SANDQ_IMAGE_PREFIX"), "sandq/"), "language images are <prefix><lang>:latest (env SANDQ_IMAGE_PREFIX)")
	return cmd
}

func (a *app) langs(cmd *cobra.Command, f *langsFlags) error {
	all := langs.All()
	outputs := map[string][]byte{}
	errs := map[string]string{}
	if !f.noVersions {
		if err := readVersions(cmd.Context(), f, all, outputs, errs); err != nil {
			for _, l := range all {
				errs[l.Name] = err.Error()
			}
		}
	}
	var infos []langInfo
	for _, in := range langs.Describe(outputs) {
		l, _ := langs.Lookup(in.Name)
		li := langInfo{Info: in, Image: l.Image(f.imagePrefix), Error: errs[in.Name]}
		if li.Version == "" && li.Error == "" && !f.noVersions {
			li.Error = "the version command printed nothing"
		}
		infos = append(infos, li)
	}
	if f.json {
		if err := writeJSON(a.stdout, infos); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		header := "LANGUAGE\tALIASES\tLIBRARIES"
		if !f.noVersions {
			header += "\tVERSION"
		}
		fmt.Fprintln(tw, header)
		for _, li := range infos {
			line := fmt.Sprintf("%s\t%s\t%s", li.Name, cmp.Or(strings.Join(li.Aliases, ", "), "-"), cmp.Or(li.Libraries, "-"))
			if !f.noVersions {
				line += "\t" + cmp.Or(li.Version, "unavailable: "+li.Error)
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var missing []string
	for _, li := range infos {
		if li.Error != "" {
			missing = append(missing, li.Name)
		}
	}
	if len(missing) > 0 {
		return &exitError{code: exitCLI, err: fmt.Errorf("could not read the version of %s (make images builds the images)", strings.Join(missing, ", "))}
	}
	return nil
}

// readVersions runs each language's version command in its image, four at
// a time, in fresh sandbox containers. It returns an error only when the
// engine cannot be used at all; a language whose command fails gets its
// reason in errs.
func readVersions(ctx context.Context, f *langsFlags, all []langs.Lang, outputs map[string][]byte, errs map[string]string) error {
	var rt interface {
		sandbox.Runtime
		Ping(context.Context) error
		Close() error
	}
	var err error
	switch f.backend {
	case "docker":
		rt, err = sandbox.NewDocker(sandbox.DockerConfig{})
	case "podman":
		rt, err = sandbox.NewPodman(sandbox.PodmanConfig{URI: f.podmanURI})
	default:
		return fmt.Errorf("--backend %q: supported backends are: docker, podman", f.backend)
	}
	if err != nil {
		return err
	}
	defer rt.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = rt.Ping(pctx)
	cancel()
	if err != nil {
		return err
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, MinIdle: -1, MaxTotal: 1, ReconcileInterval: -1})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = pool.Close(cctx)
	}()
	// The JVM and javac want more than the general default.
	lim, err := sandbox.Policy{}.Effective(sandbox.Limits{MemoryBytes: 512 << 20, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, l := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			spec := sandbox.Spec{Image: l.Image(f.imagePrefix), Limits: lim.Container(), Mode: sandbox.ModeFresh}
			res, err := pool.Run(ctx, spec, &agent.RunRequest{Steps: []agent.Step{{
				Name: "version", Argv: l.Version, Timeout: lim.Timeout, OutputLimit: 64 << 10, Rlimits: lim.Rlimits(),
			}}})
			mu.Lock()
			defer mu.Unlock()
			st := res.Last()
			switch {
			case err != nil:
				errs[l.Name] = err.Error()
			case !st.OK():
				errs[l.Name] = fmt.Sprintf("%s exited %d: %s", l.Version[0], st.ExitCode, strings.TrimSpace(string(st.Stderr.Bytes())))
			default:
				outputs[l.Name] = append(st.Stdout.Bytes(), st.Stderr.Bytes()...)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}
