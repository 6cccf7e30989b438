//go:build !remote

package sandbox

import (
	"context"
	"errors"
)

// PodmanSupported reports whether this binary has the Podman backend: it
// was built with PodmanBuildTags.
const PodmanSupported = false

// errNoPodman is what every Podman call returns in a build without the
// Podman backend.
var errNoPodman = errors.New("sandbox: built without podman support: build with -tags '" + PodmanBuildTags + "'")

// Podman is the Runtime on Podman's REST API. This build does not have it:
// every method fails with a message naming the build tags it needs.
type Podman struct{}

var _ Runtime = (*Podman)(nil)

// NewPodman fails: this binary was built without PodmanBuildTags.
func NewPodman(PodmanConfig) (*Podman, error) { return nil, errNoPodman }

// Ping fails: no Podman support in this build.
func (*Podman) Ping(context.Context) error { return errNoPodman }

// Close does nothing.
func (*Podman) Close() error { return nil }

// Name implements Runtime.
func (*Podman) Name() string { return "podman" }

// Create implements Runtime; it fails.
func (*Podman) Create(context.Context, ContainerSpec) (string, error) { return "", errNoPodman }

// Attach implements Runtime; it fails.
func (*Podman) Attach(context.Context, string) (Stream, error) { return nil, errNoPodman }

// Start implements Runtime; it fails.
func (*Podman) Start(context.Context, string) error { return errNoPodman }

// Remove implements Runtime; it fails.
func (*Podman) Remove(context.Context, string) error { return errNoPodman }

// List implements Runtime; it fails.
func (*Podman) List(context.Context, map[string]string) ([]ContainerInfo, error) {
	return nil, errNoPodman
}

// State implements Runtime; it fails.
func (*Podman) State(context.Context, string) (ContainerState, error) {
	return ContainerState{}, errNoPodman
}

// CreateVolume implements Runtime; it fails.
func (*Podman) CreateVolume(context.Context, string, map[string]string) error { return errNoPodman }

// RemoveVolume implements Runtime; it fails.
func (*Podman) RemoveVolume(context.Context, string, bool) error { return errNoPodman }

// ListVolumes implements Runtime; it fails.
func (*Podman) ListVolumes(context.Context, map[string]string) ([]VolumeInfo, error) {
	return nil, errNoPodman
}

// ImageID implements Runtime; it fails.
func (*Podman) ImageID(context.Context, string) (string, error) { return "", errNoPodman }
