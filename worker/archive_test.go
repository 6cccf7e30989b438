package worker

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// TestArchiveSettler runs the settler against the real Redis: archived
// tasks get their final Result and leave asynq with their payloads.
func TestArchiveSettler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct {
		ns        *jobstest.Namespace
		client    *client.Client
		inspector *asynq.Inspector
		settler   *archiveSettler
		queue     string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ns := jobstest.NewNamespace(t, "settle")
		b := &testBundle{ns: ns, client: ns.Client(t), inspector: asynq.NewInspectorFromRedisClient(ns.RDB),
			queue: store.AsynqQueue(ns.Prefix, jobs.QueueBatch)}
		b.settler = &archiveSettler{client: b.client, inspector: b.inspector, queuePrefix: ns.Prefix}
		return b
	}
	// archive enqueues a job and archives its task, as asynq does when
	// its retries are spent.
	archive := func(t *testing.T, b *testBundle, id string) {
		t.Helper()
		_, err := b.client.Enqueue(ctx, jobs.Job{ID: id, Lang: "python", Code: "x", Queue: jobs.QueueBatch})
		require.NoError(t, err)
		require.NoError(t, b.inspector.ArchiveTask(b.queue, id))
	}

	t.Run("SettleAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		// Three archived tasks: a worker died on the last attempt (running
		// result), one whose final result a worker stored (kept as is), one
		// canceled while running; and a pending task the settler leaves
		// alone.
		for _, id := range []string{"dead", "done", "canceled"} {
			archive(t, b, id)
		}
		_, err := b.client.Enqueue(ctx, jobs.Job{ID: "pending", Lang: "python", Code: "x", Queue: jobs.QueueBatch})
		require.NoError(t, err)
		st := b.client.Store()
		_, _, err = st.Put(ctx, jobs.Result{ID: "dead", Status: jobs.StatusRunning, Attempts: 4, Worker: "w1"})
		require.NoError(t, err)
		_, _, err = st.Put(ctx, jobs.Result{ID: "done", Status: jobs.StatusSucceeded, Worker: "w2"})
		require.NoError(t, err)
		require.NoError(t, st.RequestCancel(ctx, "canceled"))

		n, err := b.settler.settleAll(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		archived, err := b.inspector.ListArchivedTasks(b.queue)
		require.NoError(t, err)
		require.Empty(t, archived, "no payload stays archived")
		pending, err := b.inspector.ListPendingTasks(b.queue)
		require.NoError(t, err)
		require.Len(t, pending, 1)

		for id, want := range map[string]jobs.Status{"dead": jobs.StatusInternalError, "done": jobs.StatusSucceeded, "canceled": jobs.StatusCanceled} {
			r, err := st.Get(ctx, id)
			require.NoError(t, err, id)
			require.Equal(t, want, r.Status, id)
		}
		dead, _ := st.Get(ctx, "dead")
		require.Equal(t, "retries exhausted without a result", dead.Reason)
		require.Equal(t, "w1", dead.Worker)
		done, _ := st.Get(ctx, "done")
		require.Equal(t, "w2", done.Worker, "a stored final result is kept")

		n, err = b.settler.settleAll(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing left to settle")
	})

	t.Run("LoopSettlesAtOnceThenEveryTickUntilCanceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ticks := make(chan time.Time)
		b.settler.ticks = ticks
		b.settler.settled.init()
		archive(t, b, "first")

		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.settler.run(runCtx)
		}()
		require.Equal(t, 1, b.settler.settled.wait(t), "settled at start")

		archive(t, b, "second")
		ticks <- time.Now()
		require.Equal(t, 1, b.settler.settled.wait(t), "settled on the tick")
		for _, id := range []string{"first", "second"} {
			r, err := b.client.Store().Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, jobs.StatusInternalError, r.Status, id)
		}

		cancel()
		waitDone(t, done, "the settle loop")
	})
}
