package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/jobs"
)

// upload stores the collected files and lists them in the result. A failed
// upload never changes the program's status: it is named in
// ArtifactErrors. What the collector dropped, fill has already named in
// DroppedArtifacts.
//
// Each artifact's key is derived from its name alone, so the names are
// claimed again here (agent.ArtifactNames), whatever agent sent them: a
// name already taken, a directory of another, under agent.ReservedDir
// (where boundResult puts output streams) or not valid UTF-8 is dropped,
// never stored over another artifact's object.
func (h *Handler) upload(ctx context.Context, res *jobs.Result, out agent.RunResult, log zerolog.Logger) {
	var names agent.ArtifactNames
	for _, a := range out.Artifacts {
		if err := names.Claim(a.Name); err != nil {
			res.DroppedArtifacts = append(res.DroppedArtifacts, fmt.Sprintf("%s: %v; not collected", agent.ShowName(a.Name), err))
			continue
		}
		key, err := artifacts.Key(h.cfg.ArtifactPrefix, res.ID, a.Name)
		if err != nil {
			res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", a.Name, err))
			continue
		}
		ct := artifacts.ContentType(a.Name)
		err = artifacts.Retry(ctx, h.cfg.UploadAttempts, h.cfg.UploadBackoff, func() error {
			f, err := os.Open(a.File)
			if err != nil {
				return err
			}
			defer f.Close()
			return h.cfg.Artifacts.Put(ctx, key, f, a.Size, ct)
		})
		if err != nil {
			log.Error().Err(err).Str("artifact", a.Name).Msg("upload artifact")
			res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", a.Name, err))
			continue
		}
		url, err := h.cfg.Artifacts.URL(ctx, key)
		if err != nil {
			res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", a.Name, err))
		}
		res.Artifacts = append(res.Artifacts, jobs.Artifact{
			Name: a.Name, Kind: a.Kind, Key: key, URL: url, Size: a.Size, ContentType: ct,
		})
	}
}

// fetch reads an input file from the tenant's inputs area of the artifact
// store (artifacts.InputKey), at most budget bytes of it (what is left of
// the job's cap on input files). A missing key or a file past the budget
// is the job's fault; a store that does not answer is not.
func (h *Handler) fetch(ctx context.Context, tenant, name string, budget int64) ([]byte, error) {
	if h.cfg.Artifacts == nil {
		return nil, errors.New("files by object key need an artifact store, and this worker has none")
	}
	key, err := artifacts.InputKey(h.cfg.InputsPrefix, tenant, name)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = artifacts.Retry(ctx, h.cfg.UploadAttempts, h.cfg.UploadBackoff, func() error {
		rc, err := h.cfg.Artifacts.Get(ctx, key)
		if errors.Is(err, artifacts.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, budget+1))
		return err
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: artifact store: %v", errInfra, err)
	case data == nil:
		return nil, fmt.Errorf("no input %q (object %q) in the artifact store", name, key)
	case int64(len(data)) > budget:
		return nil, fmt.Errorf("input %q (object %q) is larger than the %d bytes left of the cap on a job's input files (%d)", name, key, max(budget, 0), h.cfg.Policy.MaxInlineFileBytes)
	}
	return data, nil
}
