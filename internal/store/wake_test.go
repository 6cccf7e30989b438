package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/jobs"
)

// countHook counts asynq's dequeue scripts that reach Redis (added after
// the gate's hook, it sees only what the gate lets through).
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if _, ok := dequeueQueue(cmd.Args()); ok {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := dequeueQueue(cmd.Args()); ok {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestDequeueGate drives a real asynq server (v0.26's dequeue script, as
// the worker runs it: TaskCheckInterval of a nanosecond, the gate on its
// Redis client) against real Redis.
func TestDequeueGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct {
		store   *Store
		asynq   *asynq.Client
		gate    *DequeueGate
		scripts *atomic.Int64
		holds   chan struct{}
		taken   chan string
		queue   string
		srv     *asynq.Server
		rdb     redis.UniversalClient
	}
	setup := func(t *testing.T, maxWait time.Duration) *testBundle {
		t.Helper()
		ns := redistest.NewNamespace(t, "wake")
		st, err := New(ns.RDB, Config{Prefix: ns.Prefix, ResultTTL: time.Hour})
		require.NoError(t, err)
		b := &testBundle{store: st, gate: NewDequeueGate(maxWait), scripts: &atomic.Int64{},
			holds: make(chan struct{}, 1000), taken: make(chan string, 10), queue: AsynqQueue(ns.Prefix, jobs.QueueDefault)}
		b.gate.onHold = func() {
			select {
			case b.holds <- struct{}{}:
			default:
			}
		}
		rdb := redis.NewClient(ns.RDB.Options())
		b.gate.Attach(rdb)
		rdb.AddHook(countHook{b.scripts})
		t.Cleanup(func() { _ = rdb.Close() })

		ps, err := st.SubscribeWake(ctx)
		require.NoError(t, err)
		lctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		go b.gate.Listen(lctx, ps)

		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency: 1, Queues: ServerQueues(ns.Prefix), TaskCheckInterval: time.Nanosecond,
			LogLevel: asynq.ErrorLevel,
		})
		require.NoError(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			b.taken <- id
			return nil
		})))
		t.Cleanup(func() {
			b.gate.Close()
			srv.Shutdown()
		})
		b.asynq = asynq.NewClientFromRedisClient(ns.RDB)
		b.srv, b.rdb = srv, ns.RDB
		return b
	}
	// idle waits until the server's dequeues are held: every queue was
	// found empty.
	idle := func(t *testing.T, b *testBundle) {
		t.Helper()
		select {
		case <-b.holds:
		case <-time.After(30 * time.Second):
			t.Fatal("the gate never held a dequeue")
		}
	}
	enqueue := func(t *testing.T, b *testBundle, id string) {
		t.Helper()
		_, err := b.asynq.Enqueue(asynq.NewTask("t", nil), asynq.TaskID(id), asynq.Queue(b.queue))
		require.NoError(t, err)
	}
	await := func(t *testing.T, b *testBundle, id string, within time.Duration) {
		t.Helper()
		select {
		case got := <-b.taken:
			require.Equal(t, id, got)
		case <-time.After(within):
			t.Fatalf("task %s not taken within %s", id, within)
		}
	}

	t.Run("WakeEndsTheWait", func(t *testing.T) {
		t.Parallel()
		// Without the wake the task would wait a minute.
		b := setup(t, time.Minute)
		for _, id := range []string{"w1", "w2", "w3"} {
			idle(t, b)
			enqueue(t, b, id)
			require.NoError(t, b.store.Wake(ctx, b.queue))
			await(t, b, id, 20*time.Second)
		}
	})

	t.Run("NoWakeWaitsAtMostMaxWait", func(t *testing.T) {
		t.Parallel()
		const maxWait = 300 * time.Millisecond
		b := setup(t, maxWait)
		idle(t, b)
		enqueue(t, b, "quiet") // no wake: found when the queue's clean time is up
		await(t, b, "quiet", 20*time.Second)
	})

	t.Run("IdleServerRunsFewScripts", func(t *testing.T) {
		t.Parallel()
		const maxWait = 50 * time.Millisecond
		b := setup(t, maxWait)
		idle(t, b)
		before := b.scripts.Load()
		// Eight holds: each ends at maxWait, then one round of the three
		// queues. asynq polling every nanosecond would run thousands.
		for range 8 {
			idle(t, b)
		}
		ran := b.scripts.Load() - before
		require.LessOrEqual(t, ran, int64(9*3), "dequeue scripts over 8 held rounds")
		require.Positive(t, ran, "an idle server still checks its queues every maxWait")
	})

	t.Run("AnotherQueuesWakeSkipsACleanOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute)
		idle(t, b)
		before := b.scripts.Load()
		enqueue(t, b, "c1")
		require.NoError(t, b.store.Wake(ctx, b.queue))
		await(t, b, "c1", 20*time.Second)
		idle(t, b)
		// The woken queue ran once: it found the task, and the length
		// read with it that the task was the last. The clean ones were
		// answered without a script.
		require.Equal(t, int64(1), b.scripts.Load()-before)
	})

	t.Run("BacklogIsNotHeld", func(t *testing.T) {
		t.Parallel()
		// Two tasks, one wake: the dequeue that takes the first sees
		// one left, so the next runs at once, not a minute later.
		b := setup(t, time.Minute)
		idle(t, b)
		enqueue(t, b, "b1")
		enqueue(t, b, "b2")
		require.NoError(t, b.store.Wake(ctx, b.queue))
		await(t, b, "b1", 20*time.Second)
		await(t, b, "b2", 20*time.Second)
	})

	t.Run("ClosedTakesNoNewTask", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute)
		idle(t, b)
		b.gate.Close() // the worker starts to shut down
		enqueue(t, b, "late")
		require.NoError(t, b.store.Wake(ctx, b.queue))
		b.srv.Shutdown() // returns: no dequeue held it
		info, err := asynq.NewInspectorFromRedisClient(b.rdb).GetTaskInfo(b.queue, "late")
		require.NoError(t, err)
		require.Equal(t, asynq.TaskStatePending, info.State, "left for another worker")
	})

	t.Run("ReconnectWakesEveryQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute)
		idle(t, b)
		enqueue(t, b, "r1")
		b.gate.Wake("") // as Listen does when a subscription is confirmed again
		await(t, b, "r1", 20*time.Second)
	})
}

// A queue never stays clean longer than maxWait, however long others keep
// the gate busy: a task that arrived without a wake is found.
func TestDequeueGateCleanExpires(t *testing.T) {
	t.Parallel()
	g := NewDequeueGate(time.Hour)
	ctx := context.Background()
	g.ran("q1", 0, redis.Nil, false)
	run, _ := g.enter(ctx, "q2")
	require.True(t, run, "a queue never dequeued runs")
	g.ran("q2", 0, nil, false) // found a task, not the last: stays dirty

	run, _ = g.enter(ctx, "q1")
	require.False(t, run, "clean q1 is skipped while q2 may hold tasks")

	g.mu.Lock()
	g.clean["q1"] = time.Now().Add(-time.Hour)
	g.mu.Unlock()
	run, _ = g.enter(ctx, "q1")
	require.True(t, run, "q1's clean time is up")

	// An error counts as clean (no tight loop against a failing Redis);
	// NOSCRIPT does not (the script is sent at once).
	g.ran("q1", 0, context.DeadlineExceeded, false)
	g.ran("q2", 0, redis.ErrNoScript, false)
	run, _ = g.enter(ctx, "q2")
	require.True(t, run)
	run, _ = g.enter(ctx, "q1")
	require.False(t, run)

	// Wakes of queues the gate never dequeued leave no trace.
	for i := range 100 {
		g.Wake(fmt.Sprintf("junk-%d", i))
	}
	g.mu.Lock()
	require.Empty(t, g.wakes, "wakes of unknown queues")
	require.Len(t, g.queues, 2)
	g.mu.Unlock()

	// A wake during the script keeps the queue dirty.
	pk := pendingKey("q3")
	_, wakes := g.enter(ctx, pk)
	g.ran("q2", 0, redis.Nil, false) // every other queue clean: a clean q3 would hold
	g.Wake("q3")
	g.ran(pk, wakes, redis.Nil, false)
	g.mu.Lock()
	_, clean := g.clean[pk]
	g.mu.Unlock()
	require.False(t, clean, "woken while its script ran")

	// A task that was the queue's last leaves it clean, unless a wake
	// came during the script.
	_, wakes = g.enter(ctx, pk)
	g.ran(pk, wakes, nil, true)
	g.mu.Lock()
	_, clean = g.clean[pk]
	g.mu.Unlock()
	require.True(t, clean, "took the last task")
	g.Wake("q3")
	_, wakes = g.enter(ctx, pk)
	g.Wake("q3")
	g.ran(pk, wakes, nil, true)
	g.mu.Lock()
	_, clean = g.clean[pk]
	g.mu.Unlock()
	require.False(t, clean, "took the last task, woken while its script ran")
}

func TestDequeueQueueRecognizesOnlyAsynqDequeue(t *testing.T) {
	t.Parallel()
	k := func(q, s string) string { return "asynq:{" + q + "}:" + s }
	ok := []any{"evalsha", "sha", 4, k("a", "pending"), k("a", "paused"), k("a", "active"), k("a", "lease"), 1, "p"}
	q, found := dequeueQueue(ok)
	require.True(t, found)
	require.Equal(t, pendingKey("a"), q)
	for name, args := range map[string][]any{
		"other command":  {"get", "sha", 4, k("a", "pending"), k("a", "paused"), k("a", "active"), k("a", "lease")},
		"three keys":     {"evalsha", "sha", 3, k("a", "pending"), k("a", "paused"), k("a", "active"), k("a", "lease")},
		"mixed queues":   {"evalsha", "sha", 4, k("a", "pending"), k("b", "paused"), k("a", "active"), k("a", "lease")},
		"other key kind": {"evalsha", "sha", 4, k("a", "scheduled"), k("a", "paused"), k("a", "active"), k("a", "lease")},
		"short":          {"evalsha", "sha", 4},
	} {
		_, found := dequeueQueue(args)
		require.False(t, found, name)
	}
}

// TestWakeGoesOutWithTheEnqueue: asynq's real enqueue, made with WithWake
// on a client with WakeHook, publishes its queue on WakeChannel in the same
// pipeline: the wake arrives with the task already pending, and the mark
// says it was sent. An enqueue without the mark, and every other command
// on that client, publishes nothing.
func TestWakeGoesOutWithTheEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := redistest.NewNamespace(t, "wakehook")
	st, err := New(ns.RDB, Config{Prefix: ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	rc := ns.RDB
	own := rc.WithTimeout(rc.Options().ReadTimeout)
	own.AddHook(st.WakeHook())
	ac := asynq.NewClientFromRedisClient(own)
	q := AsynqQueue(ns.Prefix, jobs.QueueDefault)

	ps, err := st.SubscribeWake(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	msgs := ps.Channel()

	// Unmarked: no wake (asynq's SADD of its queue set and the script run
	// untouched).
	_, err = ac.EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.TaskID("plain"), asynq.Queue(q))
	require.NoError(t, err)
	require.NoError(t, own.Set(ctx, ns.Prefix+":x", "1", time.Minute).Err())

	mctx, mark := WithWake(ctx)
	_, err = ac.EnqueueContext(mctx, asynq.NewTask("t", nil), asynq.TaskID("marked"), asynq.Queue(q))
	require.NoError(t, err)
	require.True(t, mark.Sent(), "the hook sent the wake")
	select {
	case m := <-msgs:
		require.Equal(t, q, m.Payload)
		// The first message is the marked enqueue's: the plain one sent none.
		n, err := ns.RDB.LLen(ctx, pendingKey(q)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "both tasks pending when the wake arrives")
	case <-time.After(10 * time.Second):
		t.Fatal("no wake published")
	}
	select {
	case m := <-msgs:
		t.Fatalf("a second wake %q: one enqueue, one wake", m.Payload)
	case <-time.After(200 * time.Millisecond):
	}

	// A task ID already taken: the enqueue fails as asynq says, and the
	// error is the command's own.
	mctx, _ = WithWake(ctx)
	_, err = ac.EnqueueContext(mctx, asynq.NewTask("t", nil), asynq.TaskID("marked"), asynq.Queue(q))
	require.ErrorIs(t, err, asynq.ErrTaskIDConflict)
}

func TestEnqueueQueueRecognizesOnlyAsynqEnqueue(t *testing.T) {
	t.Parallel()
	k := func(q, s string) string { return "asynq:{" + q + "}:" + s }
	q, found := enqueueQueue([]any{"evalsha", "sha", 2, k("p:default", "t:id1"), k("p:default", "pending"), "msg", "id1", 1})
	require.True(t, found)
	require.Equal(t, "p:default", q)
	for name, args := range map[string][]any{
		"other command": {"get", "sha", 2, k("a", "t:id"), k("a", "pending")},
		"dequeue":       {"evalsha", "sha", 4, k("a", "pending"), k("a", "paused"), k("a", "active"), k("a", "lease")},
		"mixed queues":  {"evalsha", "sha", 2, k("a", "t:id"), k("b", "pending")},
		"not a task":    {"evalsha", "sha", 2, k("a", "lease"), k("a", "pending")},
		"unique":        {"evalsha", "sha", 3, "u", k("a", "t:id"), k("a", "pending")},
		"short":         {"evalsha", "sha", 2},
	} {
		_, found := enqueueQueue(args)
		require.False(t, found, name)
	}
}
