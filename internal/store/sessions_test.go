package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
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

// A download's reply goes in chunks of at most SessionChunkBytes, read
// back one at a time in order; the first says the size; an empty file is
// one reply; what a reader leaves is dropped.
func TestSessionReplyChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "chunks")
	data := make([]byte, 2*store.SessionChunkBytes+5)
	for i := range data {
		data[i] = byte(i)
	}
	rs := store.ChunkReplies(store.SessionReply{Data: data})
	require.Len(t, rs, 3)
	require.Equal(t, int64(len(data)), rs[0].Size)
	require.True(t, rs[0].More && rs[1].More && !rs[2].More)
	require.NoError(t, n.Store.ReplySession(ctx, "req", store.SessionReply{Data: data}))
	var got []byte
	for {
		r, err := n.Store.AwaitReply(ctx, "nobody", "req", time.Now().Add(5*time.Second))
		require.NoError(t, err)
		require.LessOrEqual(t, len(r.Data), store.SessionChunkBytes)
		got = append(got, r.Data...)
		if !r.More {
			break
		}
	}
	require.Equal(t, data, got)

	empty := store.ChunkReplies(store.SessionReply{Files: []jobs.FileEntry{{Path: "x"}}})
	require.Equal(t, []store.SessionReply{{Files: []jobs.FileEntry{{Path: "x"}}}}, empty)

	require.NoError(t, n.Store.ReplySession(ctx, "left", store.SessionReply{Data: data}))
	require.NoError(t, n.Store.DropReplies(ctx, "left"))
	left, err := n.Store.Redis().Exists(ctx, n.Store.SessionReplyKey("left")).Result()
	require.NoError(t, err)
	require.Zero(t, left)
}

// SendToSession reads the record, checks its worker's heartbeat and sends
// in one round trip: to the worker the record names while it lives,
// nothing for an ended session or a gone worker, GetSession's error
// without a record.
func TestSendToSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "sendsess")
	st := n.Store
	now := time.Now().UTC()
	put := func(id, worker string, state jobs.SessionState) {
		t.Helper()
		require.NoError(t, st.PutSession(ctx, jobs.SessionInfo{ID: id, Tenant: "t", Lang: "python", State: state,
			Worker: worker, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}))
	}
	queued := func(owner string) int64 {
		t.Helper()
		l, err := n.RDB.LLen(ctx, st.SessionCommandsKey(owner)).Result()
		require.NoError(t, err)
		return l
	}
	cmd := func(id string) store.SessionCommand {
		return store.SessionCommand{Op: store.SessionOpExec, Session: id, ReqID: "r-" + id, Cell: &jobs.Cell{Code: "1"}}
	}
	require.NoError(t, st.SessionAlive(ctx, "w1"))

	put("live", "w1", jobs.SessionReady)
	info, sent, alive, err := st.SendToSession(ctx, cmd("live"))
	require.NoError(t, err)
	require.True(t, sent)
	require.True(t, alive)
	require.Equal(t, "w1", info.Worker)
	require.EqualValues(t, 1, queued("w1"))
	got, err := st.NextSessionCommand(ctx, "w1", time.Second)
	require.NoError(t, err)
	require.Equal(t, "r-live", got.ReqID)
	require.Equal(t, "1", got.Cell.Code)

	for _, state := range jobs.FinalSessionStates() {
		put("ended", "w1", state)
		info, sent, alive, err = st.SendToSession(ctx, cmd("ended"))
		require.NoError(t, err)
		require.False(t, sent, "%s: nothing sent", state)
		require.True(t, alive)
		require.Equal(t, state, info.State)
	}
	require.Zero(t, queued("w1"))

	put("orphan", "w2", jobs.SessionReady) // w2 has no heartbeat
	info, sent, alive, err = st.SendToSession(ctx, cmd("orphan"))
	require.NoError(t, err)
	require.False(t, sent)
	require.False(t, alive, "the caller marks it lost")
	require.Equal(t, jobs.SessionReady, info.State)
	require.Zero(t, queued("w2"))

	put("unplaced", "", jobs.SessionStarting)
	_, sent, alive, err = st.SendToSession(ctx, cmd("unplaced"))
	require.NoError(t, err)
	require.True(t, sent && alive, "no worker yet: the shared list, as SendSessionCommand with owner \"\"")
	require.EqualValues(t, 1, queued(""))

	_, _, _, err = st.SendToSession(ctx, cmd("missing"))
	require.ErrorIs(t, err, jobs.ErrSessionNotFound)

	require.NoError(t, n.RDB.Set(ctx, st.SessionKey("garbage"), "not json", time.Minute).Err())
	_, sent, _, err = st.SendToSession(ctx, cmd("garbage"))
	require.Error(t, err)
	require.False(t, sent)
}
