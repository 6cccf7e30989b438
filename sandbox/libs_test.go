package sandbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
		require.NoError(t, rt.RemoveVolume(ctx, sandbox.VolumePrefix+key))
	})
	return rt, key
}

// installSteps returns steps that record each install in the set (a line
// in "installs"), the uid they ran as, and whether they reached the
// network, then fail with exit code fail unless it is 0.
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
    socket.create_connection(("deb.debian.org", 80), timeout=10).close()
    net = "network"
except OSError as e:
    net = "no network: %s" % e
open(os.path.join(d, "net"), "w").write(net)
print(net)
if int(sys.argv[2]):
    print("install failed on purpose", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
`, dir, string(rune('0' + fail))},
		}}
	}
}

// TestInstallLibrarySet installs a set once for three concurrent requests,
// in a container that has a network, and runs a program that sees the set
// read-only and has no network.
func TestInstallLibrarySet(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		rt, key := libsKey(t, backend)
		vol := sandbox.VolumePrefix + key
		tb := setup(t, backend, setupOpts{minIdle: -1})
		req := sandbox.InstallRequest{Key: key, Image: testImage(), Limits: tb.lim.Container, Steps: installSteps(0)}

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
		require.Equal(t, "network\n", string(first.Steps[0].Stdout.Bytes()), "the install step has a network")

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
			LibsIdleTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Close(context.Background()) })
		found, err := other.Install(context.Background(), req)
		require.NoError(t, err)
		require.True(t, found.OK && found.Cached && len(found.Steps) == 0, "%+v", found)

		// A library set's idle container goes after LibsIdleTimeout.
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
		_, key := libsKey(t, backend)
		tb := setup(t, backend, setupOpts{minIdle: -1})
		res, err := tb.pool.Install(context.Background(), sandbox.InstallRequest{
			Key: key, Image: testImage(), Limits: tb.lim.Container, MaxBytes: 1 << 20,
			Steps: func(dir string) []agent.Step {
				return []agent.Step{{Name: "install", Timeout: 30 * time.Second, StopOnFailure: true,
					Argv: []string{"python3", "-c", "import os, sys; os.makedirs(sys.argv[1]); open(sys.argv[1] + '/big', 'wb').write(os.urandom(2 << 20))", dir}}}
			},
		})
		require.NoError(t, err)
		require.False(t, res.OK)
		last := res.Steps[len(res.Steps)-1]
		require.Equal(t, "commit", last.Name)
		require.Regexp(t, `the installed libraries take \d+ KiB on disk, over the cap of 1024 KiB`, string(last.Stderr.Bytes()))

		spec := tb.spec
		spec.Volume = sandbox.VolumePrefix + key
		out, err := tb.pool.Run(context.Background(), spec, tb.py(`import os; print(os.listdir("/sandq/libs"))`))
		require.NoError(t, err)
		require.Equal(t, "[]\n", string(out.Last().Stdout.Bytes()), "the set that was too large is gone")
	})
}
