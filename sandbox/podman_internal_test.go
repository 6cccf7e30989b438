//go:build remote

package sandbox

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities"
	"github.com/containers/podman/v5/pkg/specgen"
	gocmp "github.com/google/go-cmp/cmp"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
)

// decodeStrict decodes what sandq sends into the bindings' own type,
// refusing fields the type does not have (a misspelt tag).
func decodeStrict(t *testing.T, v any, into any) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), "%s", b)
}

// asMap is v's JSON as a map: every exported field, for a readable diff.
func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// TestPodmanAPIMatchesBindings: the requests the Podman backend makes
// itself are those the podman bindings made: the container spec decodes
// into libpod's SpecGenerator as the bindings-built one is, field for
// field, and the query parameters are the bindings' options' own.
func TestPodmanAPIMatchesBindings(t *testing.T) {
	lim := ContainerLimits{MemoryBytes: 256 << 20, NanoCPUs: 1e9, Pids: 128, WorkDirBytes: 64 << 20,
		TmpBytes: 32 << 20, NoFile: 256, FileSizeBytes: 16 << 20}
	for i, cs := range []ContainerSpec{
		{Name: "a", Image: "sandq/python", Labels: map[string]string{"sandq.pool": "k"}, Limits: lim, JobUID: 1000},
		{Name: "b", Image: "sandq/r", Limits: lim, JobUID: 1001, PinOOM: true, CPUSet: "1", OCIRuntime: "runsc", Volume: "libs"},
		{Name: "c", Image: "sandq/go", Limits: lim, JobUID: 1002, Network: true, Volume: "libs", VolumeWritable: true},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var got specgen.SpecGenerator
			decodeStrict(t, podmanSpec(cs, 4096, "/etc/sandq/seccomp.json"), &got)
			want := bindingsSpec(cs, 4096, "/etc/sandq/seccomp.json")
			require.Empty(t, gocmp.Diff(asMap(t, want), asMap(t, &got)), "(-bindings +sandq)")
		})
	}

	var vol entities.VolumeCreateOptions
	labels := map[string]string{"sandq.set": "abc"}
	decodeStrict(t, podmanVolumeCreate{Name: "v", Driver: "local", Label: labels}, &vol)
	require.Equal(t, entities.VolumeCreateOptions{Name: "v", Driver: "local", Label: labels}, vol)

	params := func(v url.Values, err error) url.Values {
		t.Helper()
		require.NoError(t, err)
		return v
	}
	filters := map[string][]string{"label": {"sandq.owner=w1"}}
	one := map[string]string{"sandq.owner": "w1"}
	require.Equal(t, params(new(containers.ListOptions).WithAll(true).WithFilters(filters).ToParams()), podmanListParams(one))
	require.Equal(t, params(new(containers.RemoveOptions).WithForce(true).WithVolumes(true).ToParams()), podmanRemoveParams())
	require.Equal(t, params(new(volumes.ListOptions).WithFilters(filters).ToParams()), podmanVolumeListParams(one))
	for _, force := range []bool{false, true} {
		require.Equal(t, params(new(volumes.RemoveOptions).WithForce(force).ToParams()), podmanVolumeRemoveParams(force))
	}
	attach := params(new(containers.AttachOptions).WithStream(true).WithDetachKeys("").ToParams())
	attach.Add("detachKeys", "") // as containers.Attach adds them
	for _, s := range []string{"stdin", "stdout", "stderr"} {
		attach.Add(s, "true")
	}
	require.Equal(t, attach, podmanAttachParams())
}

// bindingsSpec is podmanSpec as it was written on the bindings' specgen,
// before sandq sent its own requests: the reference the requests are
// held to.
func bindingsSpec(cs ContainerSpec, nproc uint64, seccompPath string) *specgen.SpecGenerator {
	l := cs.Limits
	yes, no := true, false
	tmpfs := func(dst string, size int64, extra ...string) spec.Mount {
		return spec.Mount{Type: "tmpfs", Source: "tmpfs", Destination: dst,
			Options: append([]string{"rw", "nosuid", "nodev", "exec", fmt.Sprintf("size=%d", size)}, extra...)}
	}
	rlimit := func(typ string, v uint64) spec.POSIXRlimit {
		return spec.POSIXRlimit{Type: typ, Soft: v, Hard: v}
	}
	const period = 100000 // µs; NanoCPUs as Docker converts them
	quota := l.NanoCPUs * period / 1e9
	shm := l.TmpBytes
	s := specgen.NewSpecGenerator(cs.Image, false)
	s.Name = cs.Name
	s.Command = agentArgs(cs)
	s.Labels = cs.Labels
	s.User = "0:0"
	s.WorkDir = "/work"
	s.Hostname = "sandbox"
	s.Stdin = &yes // with no --leave-stdin-open, conmon closes it when the attach ends: StdinOnce
	s.Terminal = &no
	s.Env = nil // the image's only: never the host's
	s.EnvHost = &no
	s.HTTPProxy = &no
	s.UnsetEnv = []string{"TERM"} // Podman's default TERM=xterm; Docker sets none without a TTY
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	if cs.Network {
		s.NetNS = specgen.Namespace{NSMode: specgen.Bridge} // the default network
	}
	if cs.Volume != "" {
		opt := "ro"
		if cs.VolumeWritable {
			opt = "rw"
		}
		s.Volumes = []*specgen.NamedVolume{{Name: cs.Volume, Dest: LibsDir, Options: []string{opt, "nosuid", "nodev"}}}
	}
	s.ReadOnlyFilesystem = &yes
	s.ReadWriteTmpfs = &no // no writable /run, /var/tmp besides ours
	s.CapDrop = []string{"ALL"}
	s.CapAdd = agentCaps(cs)
	s.NoNewPrivileges = &yes
	s.SeccompProfilePath = seccompPath // sandq's profile (seccomp.go), not containers-common's
	s.Mounts = []spec.Mount{
		// Podman 4.3 refuses tmpfs uid= and gid= ("unknown mount option"):
		// the agent chowns /work to the job uid before it says ready (its first
		// scrub), and proves owner and mode before every job.
		tmpfs("/work", l.WorkDirBytes, "mode=0700"),
		tmpfs("/tmp", l.TmpBytes, "mode=1777"),
	}
	s.IpcNS = specgen.Namespace{NSMode: specgen.Private}
	s.ShmSize = &shm
	s.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1"}
	s.LogConfiguration = &specgen.LogConfig{Driver: "none"}
	s.OCIRuntime = cs.OCIRuntime
	// The agent (PID 1) ignores SIGTERM: removal kills at once, as
	// Docker's forced removal does, instead of waiting for a stop timeout.
	kill, zero := syscall.SIGKILL, uint(0)
	s.StopSignal, s.StopTimeout = &kill, &zero
	swap := l.MemoryBytes // equal to the limit: no swap
	pids := pidsLimit(cs)
	per := uint64(period)
	s.ResourceLimits = &spec.LinuxResources{
		Memory: &spec.LinuxMemory{Limit: &l.MemoryBytes, Swap: &swap},
		CPU:    &spec.LinuxCPU{Quota: &quota, Period: &per, Cpus: cs.CPUSet},
		Pids:   &spec.LinuxPids{Limit: pids},
	}
	// Names as `podman run --ulimit` takes them: Podman 4.3 prefixes
	// RLIMIT_ itself ("RLIMIT_NOFILE" would become RLIMIT_RLIMIT_NOFILE).
	s.Rlimits = []spec.POSIXRlimit{
		rlimit("nofile", l.NoFile),
		rlimit("fsize", l.FileSizeBytes),
		rlimit("core", 0),
		rlimit("nproc", cmp.Or(nprocLimit(cs), nproc)),
	}
	return s
}
