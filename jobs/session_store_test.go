package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

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

// A session of a worker whose heartbeat is gone reads as lost, with the
// reason, and stays lost.
func TestSessionOfDeadWorkerIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "lost")
	c := n.Client(t)
	now := time.Now().UTC()
	info := jobs.SessionInfo{ID: "s1", Lang: "python", State: jobs.SessionReady, Worker: "gone",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	created, err := n.Store.CreateSession(ctx, info)
	require.NoError(t, err)
	require.True(t, created)
	again, err := n.Store.CreateSession(ctx, info)
	require.NoError(t, err)
	require.False(t, again, "an ID is created once")

	got, err := c.SessionInfo(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, jobs.SessionLost, got.State)
	require.Contains(t, got.Reason, "gone stopped")
	stored, err := n.Store.GetSession(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, jobs.SessionLost, stored.State, "recorded")

	s, err := c.Session(ctx, "s1")
	require.NoError(t, err)
	_, err = s.Exec(ctx, jobs.Cell{Code: "1"})
	require.ErrorIs(t, err, jobs.ErrSessionLost)
	_, err = c.Session(ctx, "nope")
	require.ErrorIs(t, err, jobs.ErrSessionNotFound)
	list, err := c.Sessions(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 1)
}

func TestValidateSession(t *testing.T) {
	t.Parallel()
	langs := []string{"bash", "javascript", "python", "r"}
	for _, tc := range []struct {
		spec  jobs.SessionSpec
		field string
	}{
		{jobs.SessionSpec{Lang: "cobol"}, "lang"},
		{jobs.SessionSpec{Lang: "go"}, "lang"},
		{jobs.SessionSpec{Lang: "python", ID: "../x"}, "id"},
		{jobs.SessionSpec{Lang: "python", Limits: jobs.Limits{MemoryMB: 1 << 20}}, "limits.memory_mb"},
		{jobs.SessionSpec{Lang: "python", Files: []jobs.File{{Path: "../x"}}}, "files[0].path"},
		{jobs.SessionSpec{Lang: "python", Files: []jobs.File{{Path: "x", Key: "k"}}}, "files[0].key"},
		{jobs.SessionSpec{Lang: "python", LifetimeSeconds: 100000}, "lifetime_seconds"},
		{jobs.SessionSpec{Lang: "python", IdleTTLSeconds: -1}, "idle_ttl_seconds"},
		{jobs.SessionSpec{Lang: "python", Env: map[string]string{"1BAD": "x"}}, "env"},
	} {
		err := jobs.Policy{}.ValidateSession(&tc.spec, langs)
		var ve *jobs.ValidationError
		require.ErrorAs(t, err, &ve, "%+v", tc.spec)
		require.Contains(t, ve.Field, tc.field, ve.Error())
	}
	spec := jobs.SessionSpec{Lang: "py"}
	require.NoError(t, jobs.Policy{}.ValidateSession(&spec, langs))
	require.Equal(t, "python", spec.Lang, "an alias becomes the canonical name")
	require.Equal(t, 600, spec.IdleTTLSeconds)
	require.Equal(t, 3600, spec.LifetimeSeconds)
	for _, p := range []string{"../a", "/etc", "a/../../b", "a\x00b"} {
		require.Error(t, jobs.ValidSessionPath(p, false), p)
	}
	require.NoError(t, jobs.ValidSessionPath("", true))
	require.Error(t, jobs.ValidSessionPath("", false))
	require.NoError(t, jobs.ValidSessionPath("a/b.txt", false))
}
