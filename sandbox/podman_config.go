package sandbox

import (
	"cmp"
	"os"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// PodmanBuildTags are the build tags the Podman backend needs: the podman
// v5 bindings compile only with them (remote selects the bindings' client
// side; the others drop storage drivers and the gpgme dependency that a
// client does not need). Without them, NewPodman returns an error saying so.
const PodmanBuildTags = "remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp"

// DefaultPodmanURI is the socket of a rootful `podman system service`.
const DefaultPodmanURI = "unix:///run/podman/podman.sock"

// PodmanConfig configures the Podman runtime.
type PodmanConfig struct {
	// URI is the address of `podman system service`, e.g.
	// unix:///run/podman/podman.sock or tcp://host:8888. Default:
	// CONTAINER_HOST, else DefaultPodmanURI.
	URI string
	// Logger receives the agents' stderr. Default: discard.
	Logger zerolog.Logger
	// NProc is every container's RLIMIT_NPROC. Podman must be given one:
	// its own default (1048576) is above the hard limit that runc inherits
	// from the service on hosts where root lacks CAP_SYS_RESOURCE, and the
	// container then fails to start ("error setting rlimit type 6"); the
	// same happens with any value above the service's hard limit, which
	// the API does not tell. (Docker containers inherit the daemon's.) The
	// kernel counts it per uid across the host (every container's uid 1000
	// together), so it cannot cap one container: the pids cgroup
	// (Limits.Pids) does. Default: 32768, or this process's hard limit if
	// lower.
	NProc uint64
}

// WithDefaults returns a copy with zero fields set to their defaults.
func (c PodmanConfig) WithDefaults() PodmanConfig {
	c.URI = cmp.Or(c.URI, os.Getenv("CONTAINER_HOST"), DefaultPodmanURI)
	if c.NProc == 0 {
		var rl unix.Rlimit
		c.NProc = 32768
		if err := unix.Getrlimit(unix.RLIMIT_NPROC, &rl); err == nil && rl.Max > 0 {
			c.NProc = min(c.NProc, rl.Max)
		}
	}
	return c
}
