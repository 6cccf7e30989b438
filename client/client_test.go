package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestClient(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	setup := newClientBundle

	// queue returns the asynq queue name of q in the bundle's namespace.
	queue := func(b *clientBundle, q jobs.Queue) string { return store.AsynqQueue(b.ns.Prefix, q) }

	// taskCount counts the tasks of every state in every queue of the
	// bundle's namespace.
	taskCount := func(t *testing.T, b *clientBundle) int {
		t.Helper()
		existing, err := b.inspector.Queues()
		require.NoError(t, err)
		n := 0
		for _, q := range jobs.Queues() {
			if !slices.Contains(existing, queue(b, q)) {
				continue // GetQueueInfo would fail on a queue never used
			}
			info, err := b.inspector.GetQueueInfo(queue(b, q))
			require.NoError(t, err)
			n += info.Size
		}
		return n
	}

	// ignoreTimes drops the timestamps, which the test cannot predict.
	ignoreTimes := cmpopts.IgnoreFields(jobs.Result{}, "EnqueuedAt", "FinishedAt")

	t.Run("EnqueueInvalidDoesNotTouchRedis", func(t *testing.T) {
		t.Parallel()

		// Nothing listens on port 1: any Redis call would fail with a
		// connection error, not a validation error.
		client, err := New(Config{RedisOptions: &redis.UniversalOptions{
			Addrs: []string{"127.0.0.1:1"}, DialTimeout: 50 * time.Millisecond, MaxRetries: -1,
		}})
		require.NoError(t, err)
		defer client.Close()

		_, err = client.Enqueue(ctx, jobs.Job{Lang: "cobol", Code: "x"})
		var verr *jobs.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, &jobs.ValidationError{Field: "lang", Msg: `unknown language "cobol"; supported: bash, c, c++, cc, cpp, cxx, go, golang, java, javascript, js, node, nodejs, py, python, python3, r, rb, rs, ruby, rust, sh, shell, ts, typescript`}, verr)
	})

	t.Run("EnqueueThenGetQueued", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		before := time.Now()
		info, err := bundle.client.Enqueue(ctx, jobs.Job{Lang: "py", Code: "print(1)", Tags: map[string]string{"k": "v"}})
		require.NoError(t, err)
		require.True(t, jobs.ValidID(info.ID), "generated ID %q", info.ID)
		require.Equal(t, EnqueueInfo{ID: info.ID, Queue: jobs.QueueDefault, Status: jobs.StatusQueued}, info)

		got, err := bundle.client.Get(ctx, info.ID)
		require.NoError(t, err)
		want := jobs.Result{ID: info.ID, Status: jobs.StatusQueued, Lang: "python", Queue: jobs.QueueDefault, Tags: map[string]string{"k": "v"}}
		if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
			t.Fatalf("Get (-want +got):\n%s", diff)
		}
		require.False(t, got.EnqueuedAt.Before(before.Truncate(time.Microsecond)), "EnqueuedAt %v before %v", got.EnqueuedAt, before)

		// The asynq task: right queue, ID, timeout, retries, and a payload
		// that is the normalized job.
		ti, err := bundle.inspector.GetTaskInfo(queue(bundle, jobs.QueueDefault), info.ID)
		require.NoError(t, err)
		require.Equal(t, asynq.TaskStatePending, ti.State)
		require.Equal(t, store.TypeExec, ti.Type)
		require.Equal(t, 11*time.Minute, ti.Timeout, "limits left zero: the deadline allows the largest built-in timeout")
		require.Equal(t, 3, ti.MaxRetry)
		j, err := store.DecodeTask(asynq.NewTask(ti.Type, ti.Payload))
		require.NoError(t, err)
		require.Equal(t, info.ID, j.ID)
		require.Equal(t, "python", j.Lang)
		require.Equal(t, int64(0), j.Limits.MemoryMB, "limits left zero are filled by the worker, from its operator defaults")
	})

	t.Run("GetQueuedTaskWithoutResult", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// A task put on the queue by other means than Enqueue: no result
		// is stored, asynq alone knows it.
		j := jobs.Job{ID: "direct", Lang: "python", Code: "x", Queue: jobs.QueueCritical, Tags: map[string]string{"a": "b"}}
		task, opts := store.NewTask(j, asynq.Queue(queue(bundle, jobs.QueueCritical)))
		_, err := bundle.asynq.EnqueueContext(ctx, task, opts...)
		require.NoError(t, err)

		got, err := bundle.client.Get(ctx, "direct")
		require.NoError(t, err)
		want := jobs.Result{ID: "direct", Status: jobs.StatusQueued, Lang: "python", Queue: jobs.QueueCritical, Tags: map[string]string{"a": "b"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Get (-want +got):\n%s", diff)
		}
	})

	t.Run("GetArchivedWithoutFinalResult", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// A worker died on the last attempt: a running result and an
		// archived task.
		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "dead", Lang: "python", Code: "x"})
		require.NoError(t, err)
		_, _, err = bundle.client.Store().Put(ctx, jobs.Result{ID: "dead", Status: jobs.StatusRunning, Attempts: 4, Worker: "w1"})
		require.NoError(t, err)
		require.NoError(t, bundle.inspector.ArchiveTask(queue(bundle, info.Queue), "dead"))

		got, err := bundle.client.Get(ctx, "dead")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusInternalError, got.Status)
		require.Equal(t, "retries exhausted without a result", got.Reason)
		require.Equal(t, "w1", got.Worker)
	})

	t.Run("GetFinishedBetweenReads", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// The worker stores its final result and asynq archives the
		// task (a rejected job) after Get read the store and before it
		// read the task: Get reports the stored result, not a
		// synthesized internal_error.
		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "late", Lang: "python", Code: "x"})
		require.NoError(t, err)
		final := jobs.Result{ID: "late", Status: jobs.StatusRejected, Reason: "jobs: poison payload"}
		bundle.client.getBetweenReads = func(id string) {
			_, _, err := bundle.client.Store().Put(ctx, final)
			require.NoError(t, err)
			require.NoError(t, bundle.inspector.ArchiveTask(queue(bundle, info.Queue), id))
		}
		got, err := bundle.client.Get(ctx, "late")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusRejected, got.Status)
		require.Equal(t, final.Reason, got.Reason)
	})

	t.Run("GetDeletedBetweenReads", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// The same, when asynq deletes the task instead of archiving it
		// (a rejected poison payload, or no retention): the task is gone
		// by the second read, and the stored result is what Get reports,
		// not "job not found".
		// Both for a job Enqueue stored as queued and for a task put
		// into asynq directly (nothing stored before the result).
		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "gone", Lang: "python", Code: "x"})
		require.NoError(t, err)
		_, err = bundle.asynq.Enqueue(asynq.NewTask(store.TypeExec, []byte(`{"id":"raw","lang":"python","code":"x"}`)),
			asynq.TaskID("raw"), asynq.Queue(queue(bundle, jobs.QueueDefault)))
		require.NoError(t, err)
		for _, id := range []string{"gone", "raw"} {
			final := jobs.Result{ID: id, Status: jobs.StatusRejected, Reason: "jobs: poison payload"}
			bundle.client.getBetweenReads = func(id string) {
				_, _, err := bundle.client.Store().Put(ctx, final)
				require.NoError(t, err)
				require.NoError(t, bundle.inspector.DeleteTask(queue(bundle, info.Queue), id))
			}
			got, err := bundle.client.Get(ctx, id)
			require.NoError(t, err, id)
			require.Equal(t, jobs.StatusRejected, got.Status, id)
			require.Equal(t, final.Reason, got.Reason, id)
		}
	})

	t.Run("GetNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.client.Get(ctx, "missing")
		require.ErrorIs(t, err, jobs.ErrNotFound)
		require.EqualError(t, err, "client: get missing: jobs: job not found")
		_, err = bundle.client.Get(ctx, "../etc")
		require.ErrorIs(t, err, jobs.ErrNotFound)
	})

	t.Run("EnqueueIdempotent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		job := jobs.Job{ID: "once", Lang: "python", Code: "print(1)"}
		first, err := bundle.client.Enqueue(ctx, job)
		require.NoError(t, err)
		require.False(t, first.Existing)

		second, err := bundle.client.Enqueue(ctx, job)
		require.NoError(t, err)
		require.Equal(t, EnqueueInfo{ID: "once", Queue: jobs.QueueDefault, Existing: true, Status: jobs.StatusQueued}, second)
		require.Equal(t, 1, taskCount(t, bundle))

		// The job finishes: the worker stores the final result and asynq
		// drops the task (no retention). Enqueue still does not rerun it.
		_, _, err = bundle.client.Store().Put(ctx, jobs.Result{ID: "once", Status: jobs.StatusSucceeded, Queue: jobs.QueueDefault})
		require.NoError(t, err)
		require.NoError(t, bundle.inspector.DeleteTask(queue(bundle, jobs.QueueDefault), "once"))

		job.Queue = jobs.QueueBatch // a different queue changes nothing
		third, err := bundle.client.Enqueue(ctx, job)
		require.NoError(t, err)
		require.Equal(t, EnqueueInfo{ID: "once", Queue: jobs.QueueDefault, Existing: true, Status: jobs.StatusSucceeded}, third)
		require.Equal(t, 0, taskCount(t, bundle))
	})

	t.Run("EnqueueConcurrentSameID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		const producers = 12
		var (
			start = make(chan struct{})
			wg    sync.WaitGroup
			mu    sync.Mutex
			fresh int
		)
		for i := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Different queues, so asynq's per-queue task-ID check
				// alone would not stop a second run.
				info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "contended", Lang: "python", Code: "x", Queue: jobs.Queues()[i%3]})
				if err != nil {
					t.Errorf("enqueue %d: %v", i, err)
					return
				}
				if !info.Existing {
					mu.Lock()
					fresh++
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()

		require.Equal(t, 1, fresh, "exactly one producer enqueues")
		require.Equal(t, 1, taskCount(t, bundle), "exactly one task")
	})

	t.Run("EnqueueRepairsClaimWithoutTask", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// A producer claimed the ID and died before reaching asynq.
		_, created, err := bundle.client.Store().Create(ctx, jobs.Result{ID: "orphan", Status: jobs.StatusQueued, Queue: jobs.QueueBatch})
		require.NoError(t, err)
		require.True(t, created)

		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "orphan", Lang: "python", Code: "x"})
		require.NoError(t, err)
		require.Equal(t, EnqueueInfo{ID: "orphan", Queue: jobs.QueueBatch, Status: jobs.StatusQueued}, info)
		ti, err := bundle.inspector.GetTaskInfo(queue(bundle, jobs.QueueBatch), "orphan")
		require.NoError(t, err)
		require.Equal(t, asynq.TaskStatePending, ti.State)
	})

	t.Run("EnqueueBatch", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "old", Lang: "python", Code: "x"})
		require.NoError(t, err)

		infos, err := bundle.client.EnqueueBatch(ctx, []jobs.Job{
			{ID: "b1", Lang: "python", Code: "x"},
			{ID: "b2", Lang: "python", Code: ""},
			{ID: "old", Lang: "python", Code: "x"},
			{ID: "b1", Lang: "python", Code: "x", Queue: jobs.QueueBatch},
			{Lang: "python", Code: "x", Queue: jobs.QueueCritical},
		})
		require.EqualError(t, err, "client: enqueue batch: 1 of 5 failed: jobs[1]: jobs: invalid job: code: is empty")
		require.Len(t, infos, 5)
		require.Equal(t, EnqueueInfo{ID: "b1", Queue: jobs.QueueDefault, Status: jobs.StatusQueued}, infos[0])
		require.Equal(t, "b2", infos[1].ID)
		var verr *jobs.ValidationError
		require.ErrorAs(t, infos[1].Err, &verr)
		require.Equal(t, EnqueueInfo{ID: "old", Queue: jobs.QueueDefault, Existing: true, Status: jobs.StatusQueued}, infos[2])
		require.Equal(t, EnqueueInfo{ID: "b1", Queue: jobs.QueueDefault, Existing: true, Status: jobs.StatusQueued}, infos[3],
			"a duplicate inside the batch is existing")
		require.True(t, jobs.ValidID(infos[4].ID))
		require.Equal(t, EnqueueInfo{ID: infos[4].ID, Queue: jobs.QueueCritical, Status: jobs.StatusQueued}, infos[4])
		require.Equal(t, 3, taskCount(t, bundle), "old, b1 and the generated one")
	})

	t.Run("WaitReturnsStoredFinal", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		final := jobs.Result{ID: "done", Status: jobs.StatusSucceeded}
		_, _, err := bundle.client.Store().Put(ctx, final)
		require.NoError(t, err)
		got, err := bundle.client.Wait(ctx, "done")
		require.NoError(t, err)
		require.Equal(t, final, got)
	})

	t.Run("WaitWakesOnPut", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "w", Lang: "python", Code: "x"})
		require.NoError(t, err)

		exit := 0
		final := jobs.Result{ID: info.ID, Status: jobs.StatusSucceeded, ExitCode: &exit, Output: jobs.Output{Stdout: "1\n"}}
		putErr := make(chan error, 1)
		// Store the final result exactly when Wait has read a non-final
		// one and is about to block, from another goroutine.
		bundle.client.waitBlocking = func(id string) {
			go func() {
				_, _, err := bundle.client.Store().Put(ctx, final)
				putErr <- err
			}()
		}
		got, err := bundle.client.Wait(ctx, info.ID)
		require.NoError(t, err)
		require.NoError(t, <-putErr)
		require.Equal(t, final, got)
	})

	t.Run("WaitEndsWithContext", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "slow", Lang: "python", Code: "x"})
		require.NoError(t, err)

		errStop := errors.New("caller gave up")
		wctx, cancel := context.WithCancelCause(ctx)
		bundle.client.waitBlocking = func(string) { cancel(errStop) }
		_, err = bundle.client.Wait(wctx, "slow")
		require.ErrorIs(t, err, errStop)
		require.EqualError(t, err, "client: wait slow: caller gave up")
	})

	t.Run("WaitSeesArchivedWithoutResult", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// The worker dies on the last attempt while Wait is blocked: asynq
		// archives the task and nothing is published. Wait's re-read
		// reports it.
		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "orphaned", Lang: "python", Code: "x"})
		require.NoError(t, err)
		bundle.client.waitRecheck = 20 * time.Millisecond
		bundle.client.waitBlocking = func(id string) {
			require.NoError(t, bundle.inspector.ArchiveTask(queue(bundle, info.Queue), id))
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := bundle.client.Wait(wctx, "orphaned")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusInternalError, got.Status)
		require.Equal(t, "retries exhausted without a result", got.Reason)
	})

	t.Run("WaitUnknown", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.client.Wait(ctx, "ghost")
		require.ErrorIs(t, err, jobs.ErrNotFound)
	})

	t.Run("CancelQueued", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "c1", Lang: "python", Code: "x", Tags: map[string]string{"k": "v"}})
		require.NoError(t, err)

		require.NoError(t, bundle.client.Cancel(ctx, "c1"))

		got, err := bundle.client.Wait(ctx, "c1")
		require.NoError(t, err)
		want := jobs.Result{ID: "c1", Status: jobs.StatusCanceled, Reason: "canceled while queued", Lang: "python",
			Queue: jobs.QueueDefault, Tags: map[string]string{"k": "v"}}
		if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
			t.Fatalf("result (-want +got):\n%s", diff)
		}
		require.False(t, got.FinishedAt.IsZero())
		_, err = bundle.inspector.GetTaskInfo(queue(bundle, jobs.QueueDefault), "c1")
		require.ErrorIs(t, err, asynq.ErrTaskNotFound, "the task is deleted")
		requested, err := bundle.client.Store().CancelRequested(ctx, "c1")
		require.NoError(t, err)
		require.True(t, requested)

		require.NoError(t, bundle.client.Cancel(ctx, "c1"), "a second cancel is not an error")
		info, err := bundle.client.Enqueue(ctx, jobs.Job{ID: "c1", Lang: "python", Code: "x"})
		require.NoError(t, err)
		require.Equal(t, EnqueueInfo{ID: "c1", Queue: jobs.QueueDefault, Existing: true, Status: jobs.StatusCanceled}, info)
	})

	t.Run("CancelUnknownAndFinal", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		err := bundle.client.Cancel(ctx, "nobody")
		require.ErrorIs(t, err, jobs.ErrNotFound)

		_, _, err = bundle.client.Store().Put(ctx, jobs.Result{ID: "fin", Status: jobs.StatusFailed})
		require.NoError(t, err)
		err = bundle.client.Cancel(ctx, "fin")
		require.ErrorIs(t, err, jobs.ErrAlreadyFinal)
		require.EqualError(t, err, "client: cancel fin: jobs: job already has a final result (status failed)")
	})

	t.Run("CancelRunning", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		st := bundle.client.Store()

		// A stand-in worker that records how the cancel reaches it: the
		// cancel channel (Store.WatchCancels, which the real worker
		// subscribes to) and asynq's CancelProcessing (the handler's
		// context). It then stores the final canceled result.
		cancelIDs, err := st.WatchCancels(t.Context())
		require.NoError(t, err)
		started := make(chan string, 1)
		type signals struct{ channel, asynqCtx bool }
		finished := make(chan signals, 1)
		// The server gets its own named connections, so the test can see
		// when asynq's subscriber has subscribed to its cancel channel:
		// asynq subscribes in a goroutine of its own, and a cancel
		// published before that is heard on sandq's channel only (the
		// worker kills on either; this test checks both are sent).
		srvName := "cancel-test-" + bundle.ns.Prefix
		srvRDB := redis.NewClient(&redis.Options{Addr: bundle.ns.Addr, ClientName: srvName})
		t.Cleanup(func() { _ = srvRDB.Close() })
		srv := asynq.NewServerFromRedisClient(srvRDB, asynq.Config{
			Concurrency:       1,
			Queues:            store.ServerQueues(bundle.ns.Prefix),
			LogLevel:          asynq.FatalLevel,
			TaskCheckInterval: 50 * time.Millisecond,
		})
		handler := asynq.HandlerFunc(func(hctx context.Context, task *asynq.Task) error {
			j, err := store.DecodeTask(task)
			if err != nil {
				return err
			}
			if _, _, err := st.Put(hctx, jobs.Result{ID: j.ID, Status: jobs.StatusRunning, Attempts: 1, Worker: "test-worker"}); err != nil {
				return err
			}
			started <- j.ID
			var got signals
			timeout := time.After(30 * time.Second)
		wait:
			for !got.channel || !got.asynqCtx {
				select {
				case id := <-cancelIDs:
					got.channel = got.channel || id == j.ID
				case <-hctx.Done():
					got.asynqCtx = true
					hctx = context.WithoutCancel(hctx)
				case <-timeout:
					break wait
				}
			}
			final := jobs.Result{ID: j.ID, Status: jobs.StatusCanceled, Reason: "canceled while running", Worker: "test-worker"}
			_, _, err = st.Put(context.WithoutCancel(hctx), final)
			finished <- got
			return err
		})
		require.NoError(t, srv.Start(handler))
		t.Cleanup(srv.Shutdown)

		require.Eventually(t, func() bool {
			list, err := bundle.rdb.ClientList(ctx).Result()
			if err != nil {
				return false
			}
			for _, line := range strings.Split(list, "\n") {
				if strings.Contains(line, " name="+srvName+" ") && strings.Contains(line, " sub=1 ") {
					return true
				}
			}
			return false
		}, 30*time.Second, 10*time.Millisecond, "asynq's subscriber subscribes to its cancel channel")

		_, err = bundle.client.Enqueue(ctx, jobs.Job{ID: "run", Lang: "python", Code: "x", MaxRetry: ptr(0)})
		require.NoError(t, err)
		require.Equal(t, "run", <-started)

		got, err := bundle.client.Get(ctx, "run")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusRunning, got.Status)

		require.NoError(t, bundle.client.Cancel(ctx, "run"))
		requested, err := st.CancelRequested(ctx, "run")
		require.NoError(t, err)
		require.True(t, requested, "the cancel key tells a later attempt not to start")
		// asynq fails the task as soon as its context is canceled, maybe
		// before the worker stores its result; Wait reports canceled
		// either way.
		got, err = bundle.client.Wait(ctx, "run")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusCanceled, got.Status)

		require.Equal(t, signals{channel: true, asynqCtx: true}, <-finished, "the running worker hears of the cancel both ways")
		// Once the worker's final result is stored, Get returns it rather
		// than the "canceled" it synthesizes from asynq's state.
		got, err = bundle.client.Get(ctx, "run")
		require.NoError(t, err)
		require.Equal(t, "canceled while running", got.Reason)
	})

	t.Run("ConfigValidation", func(t *testing.T) {
		t.Parallel()

		_, err := New(Config{QueuePrefix: "bad prefix"})
		require.EqualError(t, err, `client: config: QueuePrefix "bad prefix" has character ' ' at byte 3; allowed are A-Z a-z 0-9 _ . : -`)
		_, err = New(Config{Policy: jobs.Policy{MaxLimits: jobs.Limits{Pids: 1}, DefaultLimits: jobs.Limits{Pids: 2}}})
		require.EqualError(t, err, "jobs: policy: default limits.pids 2 processes exceeds the cap 1")
	})
}
