package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/jobs"
)

// The session slot registry: claims take from the live worker with most
// free slots, never more than it has, drop workers whose heartbeat is
// gone, and release only to registered workers.
func TestSessionSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "slots")
	st := n.Store

	_, err := st.ClaimSessionSlot(ctx)
	require.ErrorIs(t, err, jobs.ErrNoSessionSlots, "no worker")

	require.NoError(t, st.SessionHeartbeat(ctx, "a", 2, true))
	require.NoError(t, st.SessionHeartbeat(ctx, "b", 3, true))
	// A worker whose heartbeat lapsed: registered, but dead.
	require.NoError(t, n.RDB.HSet(ctx, st.SessionSlotsKey(), "dead", 100).Err())

	// Five concurrent claims: 3 from b and 2 from a, most free first,
	// never from the dead one; the sixth finds none.
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			owner, err := st.ClaimSessionSlot(ctx)
			require.NoError(t, err)
			mu.Lock()
			got[owner]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"a": 2, "b": 3}, got)
	_, err = st.ClaimSessionSlot(ctx)
	require.ErrorIs(t, err, jobs.ErrNoSessionSlots)
	exists, err := n.RDB.HExists(ctx, st.SessionSlotsKey(), "dead").Result()
	require.NoError(t, err)
	require.False(t, exists, "a dead worker's entry is dropped")

	// A slot given back is claimable again; a stopped worker takes none.
	require.NoError(t, st.ReleaseSessionSlot(ctx, "a"))
	owner, err := st.ClaimSessionSlot(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", owner)
	require.NoError(t, st.SessionServiceGone(ctx, "a"))
	require.NoError(t, st.ReleaseSessionSlot(ctx, "a"))
	exists, _ = n.RDB.HExists(ctx, st.SessionSlotsKey(), "a").Result()
	require.False(t, exists, "a release does not bring back a stopped worker")

	// A heartbeat without force re-adds a dropped entry, and leaves a
	// present one alone.
	require.NoError(t, st.SessionHeartbeat(ctx, "b", 7, false))
	free, _ := n.RDB.HGet(ctx, st.SessionSlotsKey(), "b").Int()
	require.Equal(t, 0, free, "present: unchanged")
	require.NoError(t, st.SessionHeartbeat(ctx, "c", 4, false))
	free, _ = n.RDB.HGet(ctx, st.SessionSlotsKey(), "c").Int()
	require.Equal(t, 4, free, "absent: added")
	ttl, _ := n.RDB.TTL(ctx, st.SessionHeartbeatKey("c")).Result()
	require.InDelta(t, jobs.SessionHeartbeatTTL.Seconds(), ttl.Seconds(), 1)
}
