package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/sandbox"
)

// poolBundle is a pool with room for several containers per key.
func poolBundle(t *testing.T, backend string, cfg sandbox.PoolConfig) *testBundle {
	t.Helper()
	tb := setup(t, backend, setupOpts{})
	cfg.Runtime = tb.rt
	cfg.OCIRuntime = ociRuntime(backend)
	cfg.ReconcileInterval = -1
	cfg.Logger = testLogger(t)
	pool, err := sandbox.NewPool(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, pool.Close(ctx))
	})
	tb.pool = pool
	return tb
}

// containerOf runs a job with spec as Pool.Run does (acquire, run,
// release) and returns which container ran it.
func (tb *testBundle) containerOf(t *testing.T, spec sandbox.Spec) string {
	t.Helper()
	c, err := tb.pool.Acquire(context.Background(), spec)
	require.NoError(t, err)
	req := tb.py("print('ran')")
	req.ScrubAfter = spec.Mode != sandbox.ModeFresh
	res, err := c.Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "ran\n", stdout(res.Last()), "stderr: %s", stderr(res.Last()))
	tb.pool.Release(c, true)
	return c.ID
}

// TestIsolationModes drives the pool's container sharing: reuse within a
// key, never across tenants, never in fresh mode, and recycling after
// MaxJobs.
func TestIsolationModes(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		t.Run("ReuseWithinAKey", func(t *testing.T) {
			t.Parallel()
			tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: -1, MaxTotal: 1})
			first := tb.containerOf(t, tb.spec)
			require.Equal(t, first, tb.containerOf(t, tb.spec), "one key, one container, reused")
		})
		t.Run("FreshNeverReused", func(t *testing.T) {
			t.Parallel()
			tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: 1, MaxTotal: 2})
			spec := tb.spec
			spec.Mode = sandbox.ModeFresh
			seen := map[string]bool{}
			for range 3 {
				id := tb.containerOf(t, spec)
				require.False(t, seen[id], "a fresh container served a second job")
				seen[id] = true
			}
		})
		t.Run("TenantsNeverShare", func(t *testing.T) {
			t.Parallel()
			tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: -1, MaxTotal: 1})
			a, b := tb.spec, tb.spec
			a.Tenant, b.Tenant = "acme", "globex"
			ca := tb.containerOf(t, a)
			cb := tb.containerOf(t, b)
			require.NotEqual(t, ca, cb, "two tenants got one container")
			require.Equal(t, ca, tb.containerOf(t, a), "a tenant's own container is reused")
			require.NotEqual(t, ca, tb.containerOf(t, tb.spec), "the anonymous tenant is a tenant too")
		})
		t.Run("RecycledAfterMaxJobs", func(t *testing.T) {
			t.Parallel()
			tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: -1, MaxTotal: 1, MaxJobs: 2})
			first := tb.containerOf(t, tb.spec)
			require.Equal(t, first, tb.containerOf(t, tb.spec))
			third := tb.containerOf(t, tb.spec)
			require.NotEqual(t, first, third, "a container is recycled after MaxJobs jobs")
			require.Equal(t, third, tb.containerOf(t, tb.spec))
		})
	})
}

// TestUIDPerContainer: two containers of one pool run their steps as two
// different uids, so per-uid kernel limits are not shared: one container
// exhausting its uid's inotify instances leaves the other's intact.
func TestUIDPerContainer(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: -1, MaxTotal: 2})
		ctx := context.Background()
		c1, err := tb.pool.Acquire(ctx, tb.spec)
		require.NoError(t, err)
		defer tb.pool.Release(c1, false)
		c2, err := tb.pool.Acquire(ctx, tb.spec)
		require.NoError(t, err)
		defer tb.pool.Release(c2, false)

		const exhaust = `
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = libc.inotify_init()
    if fd < 0:
        break
    fds.append(fd)
try:
    limit = open('/proc/sys/fs/inotify/max_user_instances').read()
except OSError:
    limit = -1  # gVisor: its own kernel, per sandbox, has no such file
print(os.getuid(), len(fds), limit, flush=True)
time.sleep(HOLD)
`
		type out struct {
			st  string
			err error
		}
		held := make(chan out, 1)
		go func() {
			res, err := c1.Run(ctx, tb.py(strings.Replace(exhaust, "HOLD", "8", 1)))
			held <- out{stdout(res.Last()), err}
		}()
		// While the first holds every inotify instance its uid may have,
		// the second gets as many.
		time.Sleep(2 * time.Second)
		res, err := c2.Run(ctx, tb.py(strings.Replace(exhaust, "HOLD", "0", 1)))
		require.NoError(t, err)
		var uid2, n2, limit int
		_, err = fmt.Sscan(stdout(res.Last()), &uid2, &n2, &limit)
		require.NoError(t, err, "stdout %q stderr %q", stdout(res.Last()), stderr(res.Last()))
		first := <-held
		require.NoError(t, first.err)
		var uid1, n1 int
		_, err = fmt.Sscan(first.st, &uid1, &n1)
		require.NoError(t, err, first.st)
		require.NotEqual(t, uid1, uid2, "two containers, one uid")
		if backend == "gvisor" {
			// Each sandbox has a kernel of its own: no per-uid limit is
			// shared with another, whatever the uids.
			require.Equal(t, -1, limit)
			require.Equal(t, n1, n2)
			return
		}
		require.Equal(t, limit, n1, "the first container used up its uid's instances (fs.inotify.max_user_instances)")
		require.Equal(t, limit, n2, "the second container's uid has its own inotify instances")
	})
}

// TestPoolBounds: jobs of many distinct keys never take the pool past
// MaxContainers (idle containers of other keys are evicted to make room),
// a warm key keeps MinIdle, and once idle past IdleTimeout only the warm
// key's containers remain and the other keys are dropped.
func TestPoolBounds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		const maxContainers = 3
		tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: 1, MaxTotal: 2, MaxContainers: maxContainers,
			IdleTimeout: 2 * time.Second})
		warm := tb.spec
		tb.pool.Warm(warm)

		// Sample the engine's count while the jobs run.
		ctx, stop := context.WithCancel(context.Background())
		peak := make(chan int, 1)
		go func() {
			most := 0
			for ctx.Err() == nil {
				if cs, err := tb.rt.List(ctx, map[string]string{sandbox.LabelOwner: tb.pool.Owner()}); err == nil {
					most = max(most, len(cs))
				}
				_, total := tb.pool.Stats()
				most = max(most, total)
				time.Sleep(20 * time.Millisecond)
			}
			peak <- most
		}()
		keys := 8
		errs := make(chan error, 2*keys)
		for i := range 2 * keys {
			go func() {
				spec := tb.spec
				spec.Tenant = fmt.Sprintf("t%d", i%keys)
				spec.Limits.Pids += int64(i % 3)
				res, err := tb.pool.Run(context.Background(), spec, tb.py("print('ok')"))
				if err == nil && string(res.Last().Stdout.Bytes()) != "ok\n" {
					err = fmt.Errorf("job %d: %q", i, res.Last().Stdout.Bytes())
				}
				errs <- err
			}()
		}
		for range 2 * keys {
			require.NoError(t, <-errs)
		}
		stats, total := tb.pool.Stats()
		require.LessOrEqual(t, total, maxContainers)
		names := map[string]bool{}
		for _, s := range stats {
			require.False(t, names[s.Pool], "pool names are unique: %s", s.Pool)
			names[s.Pool] = true
		}

		// After the idle timeout: only the warm key, with its MinIdle.
		var last string
		defer func() { t.Logf("pool: %s", last) }()
		require.Eventually(t, func() bool {
			stats, total := tb.pool.Stats()
			last = fmt.Sprintf("%+v total %d", stats, total)
			// Idle, not only counted: a container still starting may not be
			// listed by the engine yet.
			return len(stats) == 1 && stats[0].Warm && total == 1 && stats[0].Idle == 1
		}, 30*time.Second, 50*time.Millisecond, "only the warm key remains, its container started")
		stop()
		require.LessOrEqual(t, <-peak, maxContainers, "containers never exceed the cap")
		cs, err := tb.rt.List(context.Background(), map[string]string{sandbox.LabelOwner: tb.pool.Owner()})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		stats, _ = tb.pool.Stats()
		require.Equal(t, stats[0].Pool, cs[0].Labels[sandbox.LabelPool], "the container's label names its key as metrics do")
	})
}

// TestCPUPinning: each container of at most one CPU's quota runs on one
// CPU, the pool spreading them over the CPUs it may use; a container of a
// larger quota, or a pool with pinning off, runs on all of them.
func TestCPUPinning(t *testing.T) {
	t.Parallel()
	all := allowedCPUsForTest(t)
	affinity := func(t *testing.T, tb *testBundle, spec sandbox.Spec, n int) [][]int {
		var cs []*sandbox.Container
		for range n {
			c, err := tb.pool.Acquire(context.Background(), spec)
			require.NoError(t, err)
			cs = append(cs, c)
		}
		var sets [][]int
		for _, c := range cs {
			st := tb.runIn(t, c, "import os\nprint(sorted(os.sched_getaffinity(0)))")
			var set []int
			require.NoError(t, json.Unmarshal([]byte(stdout(st)), &set), stderr(st))
			sets = append(sets, set)
			tb.pool.Release(c, true)
		}
		return sets
	}
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: -1, MaxTotal: 2 * len(all)})
		sets := affinity(t, tb, tb.spec, 2*len(all))
		perCPU := map[int]int{}
		for _, set := range sets {
			require.Len(t, set, 1, "one CPU per container: %v", sets)
			perCPU[set[0]]++
		}
		if backend != "gvisor" { // gVisor numbers its own vCPUs from 0
			for _, cpu := range all {
				require.Equal(t, 2, perCPU[cpu], "two containers on each CPU: %v", sets)
			}
		}

		big := tb.spec
		big.Limits.NanoCPUs = int64(len(all)) * 1e9
		require.Len(t, affinity(t, tb, big, 1)[0], len(all), "a quota of more than one CPU is not pinned")

		off := poolBundle(t, backend, sandbox.PoolConfig{MinIdle: -1, MaxTotal: 1, PinCPUs: []int{}})
		require.Len(t, affinity(t, off, off.spec, 1)[0], len(all), "pinning off")
	})
}

func allowedCPUsForTest(t *testing.T) []int {
	out, err := exec.Command("python3", "-c", "import os; print(sorted(os.sched_getaffinity(0)))").Output()
	require.NoError(t, err)
	var cpus []int
	require.NoError(t, json.Unmarshal(out, &cpus))
	require.NotEmpty(t, cpus)
	return cpus
}
