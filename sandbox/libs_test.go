package sandbox_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/sandbox"
)

// libsKey returns backend's runtime and a fresh library-set key whose
// volume is removed when the test ends. Call it before setup: cleanups
// run last first, so the volume goes after the pools are closed.
func libsKey(t *testing.T, backend string) (sandbox.Runtime, string) {
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	key := "test-" + hex.EncodeToString(b[:])
	rt := newRuntime(t, backend)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, rt.RemoveVolume(ctx, sandbox.VolumePrefix+key, true))
	})
	return rt, key
}

// installSteps returns steps that record each install in the set (a line
// in "installs"), the uid they ran as, whether they reached the network
// directly and through the egress address, then fail with exit code fail
// unless it is 0.
func installSteps(fail int) func(dir string) []agent.Step {
	return func(dir string) []agent.Step {
		return []agent.Step{{
			Name: "install", Timeout: 30 * time.Second, StopOnFailure: true,
			Argv: []string{"python3", "-c", `
import os, socket, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "installs"), "a").write("one\n")
open(os.path.join(d, "uid"), "w").write(str(os.getuid()))
try:
    socket.create_connection(("deb.debian.org", 80), timeout=5).close()
    net = "network"
except OSError as e:
    net = "no network"
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"ping\n")
    net += ", egress " + s.makefile().readline().strip()
except OSError as e:
    net += ", no egress"
open(os.path.join(d, "net"), "w").write(net)
print(net)
if int(sys.argv[2]):
    print("install failed on purpose", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
`, dir, string(rune('0' + fail))},
		}}
	}
}

// echoEgress answers each egress connection's first line with "pong".
func echoEgress(t *testing.T) sandbox.EgressHandler {
	return func(ctx context.Context, conn net.Conn) {
		defer conn.Close()
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err == nil && line == "ping\n" {
			_, _ = conn.Write([]byte("pong\n"))
		}
	}
}

// TestInstallLibrarySet installs a set once for three concurrent requests,
// in a container without network whose only way out is the egress
// handler, and runs a program that sees the set read-only and has no
// network either.
func TestInstallLibrarySet(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		rt, key := libsKey(t, backend)
		vol := sandbox.VolumePrefix + key
		tb := setup(t, backend, setupOpts{minIdle: -1})
		req := sandbox.InstallRequest{Key: key, Image: testImage(), Limits: tb.lim.Container, Steps: installSteps(0), Egress: echoEgress(t)}

		var wg sync.WaitGroup
		results := make([]sandbox.InstallResult, 3)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				results[i], err = tb.pool.Install(context.Background(), req)
				require.NoError(t, err)
			}()
		}
		wg.Wait()
		for _, r := range results {
			require.True(t, r.OK, "install: %+v", r)
			require.Equal(t, vol, r.Volume)
		}
		first := results[0]
		require.NotEmpty(t, first.Steps, "the first install ran the installer")
		require.Equal(t, "no network, egress pong\n", string(first.Steps[0].Stdout.Bytes()), "the install's only way out is its egress")

		again, err := tb.pool.Install(context.Background(), req)
		require.NoError(t, err)
		require.True(t, again.OK && again.Cached, "a second install of the set is skipped: %+v", again)
		require.Equal(t, first.Dir, again.Dir)
		require.Regexp(t, `^/sandq/libs/s-[0-9a-f]{12}$`, first.Dir)
		require.Empty(t, again.Steps)
		t.Logf("%s: first install %s, second %s", backend, first.Took, again.Took)

		spec := tb.spec
		spec.Volume = vol
		res, err := tb.pool.Run(context.Background(), spec, tb.py("DIR = '"+first.Dir+"'\n"+`
import os, socket
d = "/sandq/libs/current"
print(open(d + "/installs").read().count("one"), open(d + "/uid").read(), os.readlink(d) == os.path.basename(DIR), len(os.listdir("/sandq/libs")))
try:
    open(d + "/x", "w")
    print("set writable")
except OSError as e:
    print("read-only", e.errno)
try:
    socket.create_connection(("deb.debian.org", 80), timeout=5)
    print("network")
except OSError:
    print("no network")
`))
		require.NoError(t, err)
		want := "1 1000 True 2\nread-only 30\nno network\n" // EROFS
		if backend == "gvisor" {
			want = "1 1000 True 2\nread-only 13\nno network\n" // gVisor says EACCES
		}
		require.Equal(t, want, string(res.Last().Stdout.Bytes()),
			"one install for three requests, as the job uid; the run sees the set read-only and has no network; stderr: %s",
			res.Last().Stderr.Bytes())

		// Another pool (a restarted worker) finds the set in the volume.
		other, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, MinIdle: -1, ReconcileInterval: -1, OCIRuntime: ociRuntime(backend),
			IdleTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Close(context.Background()) })
		found, err := other.Install(context.Background(), req)
		require.NoError(t, err)
		require.True(t, found.OK && found.Cached && len(found.Steps) == 0, "%+v", found)

		// An idle container goes after IdleTimeout.
		res, err = other.Run(context.Background(), spec, tb.py(`print(open("/sandq/libs/current/uid").read())`))
		require.NoError(t, err)
		require.Equal(t, "1000\n", string(res.Last().Stdout.Bytes()))
		require.Eventually(t, func() bool {
			left, err := rt.List(context.Background(), map[string]string{sandbox.LabelOwner: other.Owner()})
			return err == nil && len(left) == 0
		}, 30*time.Second, 100*time.Millisecond, "the idle container of a library set is removed")
	})
}

// TestInstallFailure: a failing installer is a result with its output; the
// set is not marked installed and its staging directory is removed.
func TestInstallFailure(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		_, key := libsKey(t, backend)
		tb := setup(t, backend, setupOpts{minIdle: -1})
		req := sandbox.InstallRequest{Key: key, Image: testImage(), Limits: tb.lim.Container, Steps: installSteps(3)}
		res, err := tb.pool.Install(context.Background(), req)
		require.NoError(t, err)
		require.False(t, res.OK)
		require.False(t, res.Cached)
		last := res.Steps[len(res.Steps)-1]
		require.Equal(t, 3, last.ExitCode)
		require.Contains(t, string(last.Stderr.Bytes()), "install failed on purpose")

		// Not cached: the next request installs again, and succeeds.
		req.Steps = installSteps(0)
		res, err = tb.pool.Install(context.Background(), req)
		require.NoError(t, err)
		require.True(t, res.OK && !res.Cached, "%+v", res)

		spec := tb.spec
		spec.Volume = res.Volume
		out, err := tb.pool.Run(context.Background(), spec, tb.py(`import os; print(sorted(os.listdir("/sandq/libs")))`))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("['current', '%s']", path.Base(res.Dir)), strings.TrimSpace(string(out.Last().Stdout.Bytes())),
			"the failed install's directory is gone")
	})
}

// TestInstallSizeCap: a set larger than MaxBytes fails the install with a
// message that says so, and is removed.
func TestInstallSizeCap(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		rt, key := libsKey(t, backend)
		tb := setup(t, backend, setupOpts{minIdle: -1})
		res, err := tb.pool.Install(context.Background(), sandbox.InstallRequest{
			Key: key, Image: testImage(), Limits: tb.lim.Container, MaxBytes: 1 << 20,
			Steps: func(dir string) []agent.Step {
				// The install may write only its set's directory: the
				// volume root is root's. Inside it, it writes too much.
				return []agent.Step{{Name: "install", Timeout: 30 * time.Second, StopOnFailure: true,
					Argv: []string{"python3", "-c", `
import os, sys
d = sys.argv[1]
try:
    open(os.path.dirname(d) + '/beside', 'wb').write(b'x' * 4096)
    print('WROTE BESIDE')
except OSError as e:
    print('beside:', e.strerror)
open(d + '/big', 'wb').write(os.urandom(2 << 20))
`, dir}}}
			},
		})
		require.NoError(t, err)
		require.False(t, res.OK)
		require.Equal(t, "beside: Permission denied\n", string(res.Steps[0].Stdout.Bytes()))
		require.Regexp(t, `the installed libraries take \d+ KiB on disk, over the cap of 1024 KiB`, res.CommitError)

		// A failed install leaves no volume.
		vols, err := rt.ListVolumes(context.Background(), map[string]string{sandbox.LabelLibs: key})
		require.NoError(t, err)
		require.Empty(t, vols, "the failed set's volume is removed")
	})
}

// TestLibsVolumeRemovedUnderneath: a set's volume removed after the pool
// found the set installed (another worker's collector) is not mounted
// empty under a job: the run fails with ErrLibsGone, the empty volume the
// engine made is removed, and the next Install installs the set again.
func TestLibsVolumeRemovedUnderneath(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		rt, key := libsKey(t, backend)
		tb := setup(t, backend, setupOpts{minIdle: -1})
		req := sandbox.InstallRequest{Key: key, Image: testImage(), Limits: tb.lim.Container, Steps: installSteps(0)}
		res, err := tb.pool.Install(context.Background(), req)
		require.NoError(t, err)
		require.True(t, res.OK, "%+v", res)
		require.NoError(t, rt.RemoveVolume(context.Background(), res.Volume, true))

		spec := tb.spec
		spec.Volume = res.Volume
		_, err = tb.pool.Run(context.Background(), spec, tb.py(`print("ran")`))
		require.ErrorIs(t, err, sandbox.ErrLibsGone)
		vols, err := rt.ListVolumes(context.Background(), nil)
		require.NoError(t, err)
		for _, v := range vols {
			require.NotEqual(t, res.Volume, v.Name, "the empty volume the engine made is removed")
		}

		again, err := tb.pool.Install(context.Background(), req)
		require.NoError(t, err)
		require.True(t, again.OK && !again.Cached, "installed again: %+v", again)
		out, err := tb.pool.Run(context.Background(), spec, tb.py(`print(open("/sandq/libs/current/installs").read().count("one"))`))
		require.NoError(t, err)
		require.Equal(t, "1\n", string(out.Last().Stdout.Bytes()))
	})
}
