package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// foreignSandbox runs jobs in images other than sandq's (Job.Environment
// "image:REF"). *sandbox.Pool implements it on Docker.
type foreignSandbox interface {
	ForeignImage(ctx context.Context, ref, agentImage string) (sandbox.ForeignImage, error)
}

// applyEnvironment makes spec the pool key of a job of lang in the
// environment env (Job.Environment), and turns off what needs sandq's own
// image (the interpreter prestart). An error that is not errInfra is the
// job's: it names the image and why it cannot be used; a
// *buildFailedError is a recipe whose image could not be built.
func (h *Handler) applyEnvironment(ctx context.Context, env, tenant, lang string, spec *sandbox.Spec, req *agent.RunRequest) error {
	if env == "" {
		return nil
	}
	ref, ok := jobs.ImageRef(env)
	if !ok {
		// A recipe's: a sandq image plus a layer, so it runs as sandq's
		// own images do (its own agent, the prestart); the pool key holds
		// its ID.
		id, err := h.recipeImage(ctx, tenant, env, lang)
		if err != nil {
			return err
		}
		spec.Image = id
		return nil
	}
	fs, ok := h.cfg.Sandbox.(foreignSandbox)
	if !ok {
		return fmt.Errorf("environment %s: this worker runs only sandq's images", env)
	}
	if !jobs.ImageAllowed(h.cfg.Policy.ImageAllow, ref) {
		return fmt.Errorf("environment %s: image %s is not allowed by this worker's --image-allow", env, ref)
	}
	l, ok := langs.Lookup(lang)
	if !ok {
		return fmt.Errorf("unknown language %q", lang)
	}
	fi, err := fs.ForeignImage(ctx, ref, l.Image(h.cfg.ImagePrefix))
	var ie *sandbox.ImageError
	switch {
	case errors.As(err, &ie):
		return fmt.Errorf("environment %s: %s", env, ie.Error())
	case errors.Is(err, sandbox.ErrForeignUnsupported):
		return fmt.Errorf("environment %s: %w", env, err)
	case err != nil:
		return fmt.Errorf("%w: environment %s: %v", errInfra, env, err)
	}
	// The reference must be one of the image's own tags or digests: the
	// engine also resolves NAME@sha256:<image ID> to any image by its ID,
	// whatever NAME says, which would take any local image past the
	// allow-list.
	if !ownRef(fi.Refs, ref) {
		return fmt.Errorf("environment %s: %s is not a tag or digest of the image it resolves to (%s)", env, ref, shortImageID(fi.ID))
	}
	spec.Image, spec.Agent = fi.ID, fi.Agent
	if req != nil {
		for i := range req.Steps {
			req.Steps[i].Prestart = false // no fork server outside sandq's images
		}
	}
	return nil
}

// ownRef reports whether ref (familiar, tagged: jobs.ImageRef) is one of
// refs, an image's tags and digests as the engine lists them.
func ownRef(refs []string, ref string) bool {
	for _, r := range refs {
		named, err := reference.ParseNormalizedNamed(r)
		if err != nil {
			continue
		}
		if reference.FamiliarString(named) == ref {
			return true
		}
	}
	return false
}

func shortImageID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

// unrunnable returns why a run in a foreign image could not start one of
// its programs (the image lacks the language's commands), or "". The
// agent reports a program it could not find as not started, or its
// launcher's "sandq: cannot run" with status 127 or 126.
func unrunnable(out agent.RunResult) string {
	for _, st := range out.Steps {
		if !st.Started && st.Error != "" && !st.Canceled {
			return st.Error
		}
		if st.Started && (st.ExitCode == 127 || st.ExitCode == 126) && st.Signal == 0 {
			if msg, ok := strings.CutPrefix(string(st.Stderr.Head), "sandq: cannot run "); ok {
				msg, _, _ = strings.Cut(msg, "\n")
				return "cannot run " + msg
			}
		}
	}
	return ""
}
