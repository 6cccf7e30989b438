package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
)

// Foreign images (docs/environments.md). An image that is not one of
// sandq's holds no agent: its containers mount sandq's agent, read-only,
// from a named volume filled from a sandq image's AgentDir, and run it as
// PID 1 (ContainerSpec.Agent). Every other setting of a container is as
// for sandq's images.

// AgentDir is where sandq's images hold the agent (AgentDir/agent), and
// where an agent volume is mounted in a foreign image's container.
const AgentDir = "/sandq"

// LabelAgentVolume marks an agent volume with the ID of the sandq image
// it was filled from.
const LabelAgentVolume = "sandq.agent-volume"

// ErrForeignUnsupported: the backend cannot run images other than sandq's.
var ErrForeignUnsupported = errors.New("sandbox: this backend runs only sandq's own images")

// ImageError says why an image cannot be used. It is the job's doing (the
// image it named), not a fault of the worker.
type ImageError struct {
	Image string
	Msg   string
}

func (e *ImageError) Error() string { return fmt.Sprintf("image %s %s", e.Image, e.Msg) }

// ImageInfo is what the engine says of an image.
type ImageInfo struct {
	// ID is the image's ID, its config's digest ("sha256:...").
	ID string
	// Refs are its repository tags and digests ("python:3.12",
	// "python@sha256:...").
	Refs []string
	// Volumes are the paths its config declares as volumes.
	Volumes []string
}

// PathStat is what a path of an image's filesystem is: "" (absent),
// "dir", or anything else ("file", "symlink to /x", ...).
type PathStat string

// foreignRuntime is what a runtime needs to run foreign images.
type foreignRuntime interface {
	// InspectImage describes a local image (an error wrapping
	// ErrNotFound when it is not there).
	InspectImage(ctx context.Context, ref string) (ImageInfo, error)
	// StatImage reports paths of an image's filesystem, symbolic links
	// not followed.
	StatImage(ctx context.Context, image string, paths []string) (map[string]PathStat, error)
	// FillAgentVolume copies AgentDir of the sandq image from into the
	// (empty) volume, and checks that the agent is there.
	FillAgentVolume(ctx context.Context, volume, from string) error
}

// ForeignImage is a foreign image checked for use: Spec.Image and
// Spec.Agent of the jobs that run in it.
type ForeignImage struct {
	// ID is the image's ID: the pool key holds it, never a tag, so a tag
	// moved to another image never reaches a warm container of the old.
	ID string
	// Refs are the image's tags and digests (ImageInfo.Refs).
	Refs []string
	// Agent is the agent volume to mount.
	Agent string
}

// foreignState caches, per pool, the images found usable and the agent
// volumes filled.
type foreignState struct {
	mu      sync.Mutex
	checked map[string]string // by image ID: why it cannot be used, "" if it can
	filled  map[string]bool   // agent volumes
	fill    sync.Mutex        // one fill at a time
}

// mustBeDirs are the paths a foreign image may hold only as directories
// (or not at all): the mount points of the agent and of the writable
// tmpfs. A link there would move a mount elsewhere in the image.
var mustBeDirs = []string{AgentDir, "/work", "/tmp"}

// ForeignImage checks that the local image ref can run sandq jobs, and
// that the agent volume filled from the sandq image agentImage is ready.
// An image that cannot be used is an *ImageError; a backend without
// foreign images is ErrForeignUnsupported; anything else is a fault.
func (p *Pool) ForeignImage(ctx context.Context, ref, agentImage string) (ForeignImage, error) {
	fr, ok := p.cfg.Runtime.(foreignRuntime)
	if !ok {
		return ForeignImage{}, fmt.Errorf("%w (backend %s): image %s", ErrForeignUnsupported, p.cfg.Runtime.Name(), ref)
	}
	info, err := fr.InspectImage(ctx, ref)
	if errors.Is(err, ErrNotFound) {
		return ForeignImage{}, &ImageError{Image: ref, Msg: "is not on this worker's container engine (sandq pulls no image)"}
	}
	if err != nil {
		return ForeignImage{}, err
	}
	p.foreign.mu.Lock()
	if p.foreign.checked == nil {
		p.foreign.checked, p.foreign.filled = map[string]string{}, map[string]bool{}
	}
	msg, seen := p.foreign.checked[info.ID]
	p.foreign.mu.Unlock()
	if !seen {
		if msg, err = p.checkImage(ctx, fr, info); err != nil {
			return ForeignImage{}, fmt.Errorf("sandbox: image %s: %w", ref, err)
		}
		p.foreign.mu.Lock()
		p.foreign.checked[info.ID] = msg
		p.foreign.mu.Unlock()
	}
	if msg != "" {
		return ForeignImage{}, &ImageError{Image: ref, Msg: msg}
	}
	vol, err := p.agentVolume(ctx, fr, agentImage)
	if err != nil {
		return ForeignImage{}, err
	}
	return ForeignImage{ID: info.ID, Refs: info.Refs, Agent: vol}, nil
}

// checkImage says why an image cannot be used ("" if it can), or returns
// an error when it could not tell.
func (p *Pool) checkImage(ctx context.Context, fr foreignRuntime, info ImageInfo) (string, error) {
	if len(info.Volumes) > 0 {
		// The engine would give each a writable volume of its own, which
		// no scrub empties: the root file system would not be read-only.
		return fmt.Sprintf("declares volumes (%s): sandq runs an image with a read-only root and no volume of its own", strings.Join(info.Volumes, ", ")), nil
	}
	st, err := fr.StatImage(ctx, info.ID, mustBeDirs)
	if err != nil {
		return "", err
	}
	for _, path := range mustBeDirs {
		if s := st[path]; s != "" && s != "dir" {
			return fmt.Sprintf("has %s as a %s: sandq mounts its agent at %s and tmpfs at /work and /tmp, which must be directories or absent", path, s, AgentDir), nil
		}
	}
	return "", nil
}

// agentVolume returns the agent volume filled from the sandq image
// agentImage, filling it first if need be. It is named by that image's
// ID, so an image rebuilt with a new agent gets a new volume.
func (p *Pool) agentVolume(ctx context.Context, fr foreignRuntime, agentImage string) (string, error) {
	id, err := p.cfg.Runtime.ImageID(ctx, agentImage)
	if err != nil {
		return "", fmt.Errorf("sandbox: the agent's image: %w", err)
	}
	vol := "sandq-agent-" + shortID(strings.TrimPrefix(id, "sha256:"))
	p.foreign.mu.Lock()
	done := p.foreign.filled[vol]
	p.foreign.mu.Unlock()
	if done {
		return vol, nil
	}
	p.foreign.fill.Lock()
	defer p.foreign.fill.Unlock()
	p.foreign.mu.Lock()
	done = p.foreign.filled[vol]
	p.foreign.mu.Unlock()
	if done {
		return vol, nil
	}
	if err := p.cfg.Runtime.CreateVolume(ctx, vol, map[string]string{LabelManaged: "true", LabelAgentVolume: id}); err != nil {
		return "", err
	}
	if err := fr.FillAgentVolume(ctx, vol, agentImage); err != nil {
		return "", fmt.Errorf("sandbox: fill the agent volume %s from %s: %w", vol, agentImage, err)
	}
	p.foreign.mu.Lock()
	p.foreign.filled[vol] = true
	p.foreign.mu.Unlock()
	p.removeOldAgentVolumes(ctx, vol)
	return vol, nil
}

// removeOldAgentVolumes removes the agent volumes other than keep that were
// filled from images no longer on the engine (sandq images since rebuilt)
// and that no container uses; best effort.
func (p *Pool) removeOldAgentVolumes(ctx context.Context, keep string) {
	vols, err := p.cfg.Runtime.ListVolumes(ctx, map[string]string{LabelManaged: "true"})
	if err != nil {
		return
	}
	for _, v := range vols {
		from := v.Labels[LabelAgentVolume]
		if from == "" || v.Name == keep {
			continue
		}
		if _, err := p.cfg.Runtime.ImageID(ctx, from); err == nil || !cerrdefs.IsNotFound(err) {
			continue // its image is still there (or the engine could not say)
		}
		p.forgetAgent(v.Name)
		if err := p.cfg.Runtime.RemoveVolume(ctx, v.Name, false); err != nil {
			p.log.Debug().Err(err).Str("volume", v.Name).Msg("old agent volume kept")
		}
	}
}

// forgetAgent forgets that an agent volume was filled: the next job in a
// foreign image checks it again (it may have been removed).
func (p *Pool) forgetAgent(vol string) {
	p.foreign.mu.Lock()
	delete(p.foreign.filled, vol)
	p.foreign.mu.Unlock()
}

// goRuntimeEnv are the variables the Go runtime of the agent reads: a
// foreign image's config may not set them for it (they are set empty).
var goRuntimeEnv = []string{"GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GOTRACEBACK"}
