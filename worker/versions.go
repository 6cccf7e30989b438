package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// OneShot runs one-off commands in containers of their own
// (*sandbox.Pool).
type OneShot interface {
	RunOnce(ctx context.Context, spec sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error)
	ImageID(ctx context.Context, image string) (string, error)
}

var _ OneShot = (*sandbox.Pool)(nil)

// PublishVersions reads every language's toolchain version from its image
// (its Version command, in a fresh sandbox container of the language's
// default job) and publishes it in the store, where `enqueue langs` and the
// HTTP API read it: producers need no container engine. A version already
// published for the same image ID is not read again. A language whose
// image is missing here is published with the reason, unless a version is
// already published (another worker has the image). It returns the first
// store error; a command that fails is published with its reason.
func PublishVersions(ctx context.Context, sb OneShot, st *store.Store, policy jobs.Policy, imagePrefix, worker string) error {
	known, err := st.LangVersions(ctx)
	if err != nil {
		return err
	}
	for _, l := range langs.All() {
		v := jobs.LangVersion{Lang: l.Name, Image: l.Image(imagePrefix), Worker: worker}
		id, err := sb.ImageID(ctx, v.Image)
		if err != nil {
			if _, ok := known[l.Name]; ok || ctx.Err() != nil {
				continue
			}
			v.Error, v.At = "image missing on this worker's engine: "+err.Error(), time.Now().UTC()
		} else if k, ok := known[l.Name]; ok && k.ImageID == id && k.Error == "" {
			continue
		} else {
			v.ImageID = id
			v.Version, v.Error = readVersion(ctx, sb, policy, imagePrefix, l)
			v.At = time.Now().UTC()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := st.PutLangVersion(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// versionPublisher is the worker's one-shot loop that publishes the
// toolchain versions (PublishVersions) at start, logging the outcome: the
// e2e tests wait for "toolchain versions published".
type versionPublisher struct {
	sandbox     OneShot
	store       *store.Store
	policy      jobs.Policy
	imagePrefix string
	worker      string
	log         zerolog.Logger
}

// run publishes the versions once; it returns early when ctx ends.
func (v *versionPublisher) run(ctx context.Context) {
	err := PublishVersions(ctx, v.sandbox, v.store, v.policy, v.imagePrefix, v.worker)
	switch {
	case err != nil && ctx.Err() == nil:
		v.log.Warn().Err(err).Msg("publish toolchain versions")
	case err == nil:
		v.log.Info().Msg("toolchain versions published")
	}
}

// readVersion runs l's Version command as a job of l with default limits
// would run.
func readVersion(ctx context.Context, sb OneShot, policy jobs.Policy, imagePrefix string, l langs.Lang) (version, reason string) {
	spec, _ := WarmSpec(policy, l.Name, imagePrefix)
	spec.Mode = sandbox.ModeFresh
	lim := LimitsOf(policy.WithDefaults().DefaultLimits)
	res, err := sb.RunOnce(ctx, spec, &agent.RunRequest{Steps: []agent.Step{{
		Name: "version", Argv: l.Version, Timeout: 30 * time.Second, OutputLimit: 64 << 10, Rlimits: lim.Rlimits,
	}}})
	st := res.Last()
	switch {
	case err != nil:
		return "", err.Error()
	case !st.OK():
		return "", fmt.Sprintf("%s exited %d: %s", l.Version[0], st.ExitCode, strings.TrimSpace(string(st.Stderr.Bytes())))
	}
	v := langs.ParseVersion(append(st.Stdout.Bytes(), st.Stderr.Bytes()...))
	if v == "" {
		return "", "the version command printed nothing"
	}
	return v, ""
}
