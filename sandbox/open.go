package sandbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
)

// Backends are the container engines sandq runs on, the default first.
var Backends = []string{"docker", "podman"}

// Options says which engine to open. The zero value is the local Docker
// engine.
type Options struct {
	// Backend is "docker" (the default) or "podman".
	Backend string
	// DockerHost is the Docker engine's address. Default: DOCKER_HOST and
	// the other DOCKER_* variables, else the local socket.
	DockerHost string
	// PodmanURI is the Podman service's address. Default: CONTAINER_HOST,
	// else DefaultPodmanURI.
	PodmanURI string
	// Logger receives the agents' stderr and the backend's logs. Default:
	// discard.
	Logger zerolog.Logger
}

// Engine is an open container engine: the Runtime the pool drives, and
// the engine's own lifecycle.
type Engine interface {
	Runtime
	// Ping checks that the engine answers.
	Ping(ctx context.Context) error
	// Close releases the client's connections.
	Close() error
}

var (
	_ Engine = (*Docker)(nil)
	_ Engine = (*Podman)(nil)
)

// Open is the one way sandq's commands reach a container engine: it
// connects to the backend opts names and checks, within 10 s, that it
// answers.
func Open(ctx context.Context, opts Options) (Engine, error) {
	var e Engine
	var err error
	switch opts.Backend {
	case "", "docker":
		e, err = NewDocker(DockerConfig{Host: opts.DockerHost, Logger: opts.Logger})
	case "podman":
		e, err = NewPodman(PodmanConfig{URI: opts.PodmanURI, Logger: opts.Logger})
	default:
		return nil, fmt.Errorf("sandbox: backend %q: supported backends are %v", opts.Backend, Backends)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Ping(ctx); err != nil {
		_ = e.Close()
		return nil, err
	}
	return e, nil
}

// ValidBackend reports whether name is one of Backends.
func ValidBackend(name string) bool { return slices.Contains(Backends, name) }
