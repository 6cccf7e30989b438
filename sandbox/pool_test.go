package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/sandbox"
)

// agentID is a program that prints which container it runs in: the host
// directory the engine mounts the container's /etc/hostname from (it holds
// the container's ID on both engines), and the start time of its PID 1,
// the agent, in clock ticks since boot.
const agentID = `
root = ''
for line in open('/proc/self/mountinfo'):
    f = line.split()
    if f[4] == '/etc/hostname':
        root = f[3]
stat = open('/proc/1/stat').read().rsplit(')', 1)[1].split()
print(root, stat[19], end='')
`

// poolBundle is a pool with room for several containers per key.
func poolBundle(t *testing.T, backend string, cfg sandbox.PoolConfig) *testBundle {
	t.Helper()
	tb := setup(t, backend, setupOpts{})
	cfg.Runtime = tb.rt
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

// containerOf runs agentID through the pool with spec and returns which
// container ran it.
func (tb *testBundle) containerOf(t *testing.T, spec sandbox.Spec) string {
	t.Helper()
	res, err := tb.pool.Run(context.Background(), spec, tb.py(agentID))
	require.NoError(t, err)
	st := res.Last()
	require.True(t, st.OK(), "stderr: %s", stderr(st))
	return strings.TrimSpace(stdout(st))
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
