package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// TestHeartbeat drives the heartbeat loop's ticks against the real Redis:
// each tick renews the owner's key for a full TTL, and the loop ends with
// its context.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct {
		ns    *jobstest.Namespace
		hb    *heartbeat
		ticks chan time.Time
		key   string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ns := jobstest.NewNamespace(t, "heartbeat")
		owner := "hb-" + jobs.NewID()[:12] // owner keys are not namespaced
		key := store.OwnerKey(owner)
		t.Cleanup(func() { _ = ns.RDB.Del(context.Background(), key).Err() })
		b := &testBundle{ns: ns, ticks: make(chan time.Time), key: key}
		b.hb = &heartbeat{owners: ns.Store, owner: owner, ttl: time.Minute, ticks: b.ticks}
		b.hb.renewed.init()
		return b
	}

	t.Run("RenewsOnEveryTickUntilCanceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.hb.run(runCtx)
		}()

		alive, err := b.ns.Store.OwnerAlive(ctx, b.hb.owner)
		require.NoError(t, err)
		require.False(t, alive, "the loop only renews: the Server stores the first beat")

		for range 2 {
			// The key about to expire: a tick renews it for the full TTL.
			require.NoError(t, b.ns.RDB.Set(ctx, b.key, "old", time.Second).Err())
			b.ticks <- time.Now()
			require.NoError(t, b.hb.renewed.wait(t))
			ttl, err := b.ns.RDB.TTL(ctx, b.key).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, 50*time.Second, "renewed for the heartbeat's TTL")
		}

		cancel()
		waitDone(t, done, "the heartbeat loop")
	})

	t.Run("DefaultInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.hb.ttl, b.hb.ticks = 0, nil
		require.NoError(t, b.hb.beat(ctx))
		ttl, err := b.ns.RDB.TTL(ctx, b.key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 25*time.Second, "heartbeatTTL")
		require.LessOrEqual(t, ttl, heartbeatTTL)

		// With its own ticker (every 10 s) the loop still ends at once.
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.hb.run(runCtx)
		}()
		cancel()
		waitDone(t, done, "the heartbeat loop")
	})

	t.Run("PublishesStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		m := newMetrics()
		for _, ms := range []int64{3, 8, 40} {
			m.observe(jobs.Result{Lang: "python", Status: jobs.StatusSucceeded, Usage: jobs.Usage{WallMS: ms}})
		}
		pool := stubPool{stats: []sandbox.Stats{{Pool: "sandq/python:latest", Idle: 1, Total: 3, Warm: true}}, total: 3}
		b.hb.status = func() store.WorkerStatus { return m.status(pool) }
		require.NoError(t, b.hb.beat(ctx))
		got, err := b.ns.Store.WorkerStatuses(ctx, []string{b.hb.owner})
		require.NoError(t, err)
		st := got[b.hb.owner]
		require.WithinDuration(t, time.Now(), st.At, time.Minute)
		require.Equal(t, []store.PoolStatus{{Pool: "sandq/python:latest", Idle: 1, Busy: 2, Warm: true}}, st.Pools)
		require.Equal(t, 3, st.Containers)
		require.Len(t, st.Latency, 1)
		require.Equal(t, "python", st.Latency[0].Lang)
		require.Equal(t, 3, st.Latency[0].Jobs)
		require.Equal(t, int64(8), st.Latency[0].P50MS)
		ttl, err := b.ns.RDB.TTL(ctx, b.ns.Store.WorkerStatusKey(b.hb.owner)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 50*time.Second, "as long as the beat")
	})
}

type stubPool struct {
	stats []sandbox.Stats
	total int
}

func (p stubPool) Stats() ([]sandbox.Stats, int) { return p.stats, p.total }
