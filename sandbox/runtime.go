package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// Runtime is the narrow seam to a container engine: only what the pool and
// the reconciler need. docker.go implements it on the Docker Engine API.
type Runtime interface {
	// Name is the backend's name ("docker", "podman") for labels and logs.
	Name() string
	// Create makes a container from spec without starting it.
	Create(ctx context.Context, spec ContainerSpec) (id string, err error)
	// Attach opens the container's stdin and stdout. It must be called
	// before Start so no byte the agent writes is lost.
	Attach(ctx context.Context, id string) (Stream, error)
	// Start starts a created container.
	Start(ctx context.Context, id string) error
	// Remove kills and removes a container. A container that is already
	// gone, or already being removed, is a success.
	Remove(ctx context.Context, id string) error
	// List returns the containers, in any state, carrying all of labels.
	List(ctx context.Context, labels map[string]string) ([]ContainerInfo, error)
	// State reports how a container stands, or how it ended.
	State(ctx context.Context, id string) (ContainerState, error)

	// CreateVolume makes a named volume on the engine's local driver. A
	// volume of that name that already exists is a success.
	CreateVolume(ctx context.Context, name string, labels map[string]string) error
	// RemoveVolume removes a named volume; one that does not exist is a
	// success. Without force, a volume a container uses is not removed
	// (an error).
	RemoveVolume(ctx context.Context, name string, force bool) error
	// ListVolumes returns the volumes carrying all of labels.
	ListVolumes(ctx context.Context, labels map[string]string) ([]VolumeInfo, error)
	// ImageID returns the ID of a local image.
	ImageID(ctx context.Context, image string) (string, error)
}

// Stream is an attached container: reads return the agent's stdout, writes
// go to its stdin. Close detaches; the agent sees EOF and exits.
type Stream interface {
	io.Reader
	io.Writer
	Close() error
}

// ContainerSpec is everything a runtime needs to create one sandbox
// container. The hardening in it is not optional: runtimes apply every
// field, and ContainerSpec has no way to ask for a host mount, host
// networking or added privileges.
type ContainerSpec struct {
	Name   string
	Image  string
	Labels map[string]string
	Limits ContainerLimits
	// Volume, when set, is a named volume (see Runtime.CreateVolume)
	// mounted at LibsDir: read-only, unless VolumeWritable. Library sets
	// live in them (see Pool.Install).
	Volume         string
	VolumeWritable bool
	// Agent, when set, is an agent volume (Pool.ForeignImage): Image is
	// not sandq's, and its container runs AgentDir/agent from the volume,
	// mounted read-only at AgentDir, whatever the image's config says
	// (entrypoint, command, user, working dir, health check,
	// environment variables of the agent's Go runtime).
	Agent string
	// Network gives the container the engine's default bridge network:
	// outbound connections, no published ports. Only library installs ask
	// for it; a run container never has a network.
	Network bool
	// OCIRuntime selects the engine's OCI runtime (for example "runsc" for
	// gVisor). Empty means the engine's default.
	OCIRuntime string
	// JobUID is the uid (and gid) the container's steps run as, passed to
	// the agent on its command line and owning /work. Never 0.
	JobUID int
	// PrestartHold, passed to the agent (agent.Config.PrestartHold), is how
	// long the container keeps the interpreter it started for the next job
	// while no job comes. 0: the agent's default; negative: for its life.
	PrestartHold time.Duration
	// PinOOM gives the agent OOMPinCap, to keep the OOM killer off itself.
	PinOOM bool
	// CPUSet, when set, is the host CPUs the container runs on ("3"), as
	// in `docker run --cpuset-cpus`. The pool pins each container of at
	// most one CPU's quota to one CPU (PoolConfig.PinCPUs).
	CPUSet string
}

// ContainerInfo is one container as listed by the engine.
type ContainerInfo struct {
	ID      string
	Name    string
	Labels  map[string]string
	State   string // created, running, exited, dead, ...
	Created time.Time
}

// VolumeInfo is one volume as listed by the engine.
type VolumeInfo struct {
	Name    string
	Labels  map[string]string
	Created time.Time
}

// ContainerState is what the engine says of a container.
type ContainerState struct {
	Running bool
	// OOMKilled: the kernel's OOM killer killed a process of the
	// container (under gVisor, the sandbox itself).
	OOMKilled bool
	ExitCode  int
}

// ErrNotFound is returned by runtimes for a container that does not exist.
var ErrNotFound = errors.New("sandbox: container not found")
