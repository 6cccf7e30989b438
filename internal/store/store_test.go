package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/jobs"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestStore(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		rdb   *redis.Client
		store *Store
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		ns := redistest.NewNamespace(t, "store")
		rdb := ns.RDB
		store, err := New(rdb, Config{Prefix: ns.Prefix, ResultTTL: time.Hour})
		require.NoError(t, err)
		return &testBundle{rdb: rdb, store: store}
	}

	t.Run("PlainJSONUnderDocumentedKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		code := 0
		r := jobs.Result{ID: "j1", Status: jobs.StatusSucceeded, ExitCode: &code, Output: jobs.Output{Stdout: "<hi>\n"}}
		_, written, err := bundle.store.Put(ctx, r)
		require.NoError(t, err)
		require.True(t, written)

		key := bundle.store.ResultKey("j1")
		require.Equal(t, bundle.store.prefix+":result:j1", key)
		raw, err := bundle.rdb.Get(ctx, key).Result()
		require.NoError(t, err)
		require.JSONEq(t, `{"id":"j1","status":"succeeded","exit_code":0,"stdout":"<hi>\n","stderr":""}`, raw)
		require.Contains(t, raw, `"<hi>\n"`, "no HTML escaping, so redis-cli shows the output as is")

		ttl, err := bundle.rdb.PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 59*time.Minute)
		require.LessOrEqual(t, ttl, time.Hour)

		got, err := bundle.store.Get(ctx, "j1")
		require.NoError(t, err)
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatalf("Get (-want +got):\n%s", diff)
		}
	})

	t.Run("StartKeepsEnqueuedAtAndReportsCancel", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		enq := time.Date(2026, 11, 27, 1, 2, 3, 456789000, time.UTC)
		_, written, err := bundle.store.Create(ctx, jobs.Result{ID: "j", Status: jobs.StatusQueued, Tenant: "acme", EnqueuedAt: enq})
		require.NoError(t, err)
		require.True(t, written)

		started := time.Date(2026, 11, 27, 1, 2, 4, 0, time.UTC)
		running := jobs.Result{ID: "j", Status: jobs.StatusRunning, Tenant: "acme", StartedAt: started, Attempts: 1}
		out, err := bundle.store.Start(ctx, running)
		require.NoError(t, err)
		require.True(t, out.Written)
		require.False(t, out.Canceled)
		require.True(t, enq.Equal(out.Stored.EnqueuedAt), "the claim's enqueue time comes back: %v", out.Stored.EnqueuedAt)
		got, err := bundle.store.Get(ctx, "j")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusRunning, got.Status)
		require.True(t, enq.Equal(got.EnqueuedAt), "and stays stored: %v", got.EnqueuedAt)
		require.True(t, started.Equal(got.StartedAt))

		require.NoError(t, bundle.store.RequestCancel(ctx, "j"))
		running.Attempts = 2
		out, err = bundle.store.Start(ctx, running)
		require.NoError(t, err)
		require.True(t, out.Written)
		require.True(t, out.Canceled, "a cancel requested before the attempt is reported")

		// With nothing stored before (its claim expired): no enqueue time, no error.
		out, err = bundle.store.Start(ctx, jobs.Result{ID: "k", Status: jobs.StatusRunning, Tenant: "acme"})
		require.NoError(t, err)
		require.True(t, out.Written)
		require.True(t, out.Stored.EnqueuedAt.IsZero())

		code := 0
		_, _, err = bundle.store.Put(ctx, jobs.Result{ID: "j", Status: jobs.StatusSucceeded, ExitCode: &code, Tenant: "acme"})
		require.NoError(t, err)
		out, err = bundle.store.Start(ctx, running)
		require.NoError(t, err)
		require.False(t, out.Written, "a final Result is never replaced by a start")
		require.Equal(t, jobs.StatusSucceeded, out.Stored.Status)
	})

	t.Run("GetNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Get(ctx, "nope")
		require.ErrorIs(t, err, jobs.ErrNotFound)
		require.EqualError(t, err, "store: get result nope: jobs: job not found")
	})

	t.Run("NonFinalOverwritesNonFinal", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for _, r := range []jobs.Result{
			{ID: "j", Status: jobs.StatusQueued},
			{ID: "j", Status: jobs.StatusRunning, Attempts: 1, Worker: "w1"},
			{ID: "j", Status: jobs.StatusRunning, Attempts: 2, Worker: "w2"},
		} {
			stored, written, err := bundle.store.Put(ctx, r)
			require.NoError(t, err)
			require.True(t, written)
			require.Equal(t, r, stored)
		}
		got, err := bundle.store.Get(ctx, "j")
		require.NoError(t, err)
		require.Equal(t, "w2", got.Worker)
	})

	t.Run("FinalIsNeverReplaced", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		final := jobs.Result{ID: "j", Status: jobs.StatusTimeout, Reason: "limits.timeout_ms 10 expired", Worker: "w1"}
		_, written, err := bundle.store.Put(ctx, final)
		require.NoError(t, err)
		require.True(t, written)

		for _, late := range []jobs.Result{
			{ID: "j", Status: jobs.StatusRunning, Worker: "w2"},
			{ID: "j", Status: jobs.StatusSucceeded, Worker: "w2"},
			{ID: "j", Status: jobs.StatusQueued},
		} {
			stored, written, err := bundle.store.Put(ctx, late)
			require.NoError(t, err)
			require.False(t, written, "late %s write replaced the final result", late.Status)
			require.Equal(t, final, stored)
		}
		got, err := bundle.store.Get(ctx, "j")
		require.NoError(t, err)
		require.Equal(t, final, got)
	})

	t.Run("FirstFinalWinsUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, _, err := bundle.store.Put(ctx, jobs.Result{ID: "race", Status: jobs.StatusRunning})
		require.NoError(t, err)

		const workers = 32
		statuses := []jobs.Status{jobs.StatusSucceeded, jobs.StatusFailed, jobs.StatusCanceled, jobs.StatusInternalError}
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []jobs.Result
			seen    []jobs.Result
		)
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := jobs.Result{ID: "race", Status: statuses[i%len(statuses)], Worker: fmt.Sprintf("w%d", i)}
				if i%3 == 0 {
					// Interleave late non-final writes too.
					if _, _, err := bundle.store.Put(ctx, jobs.Result{ID: "race", Status: jobs.StatusRunning, Worker: r.Worker}); err != nil {
						t.Errorf("put running: %v", err) // not require: this is not the test goroutine
						return
					}
				}
				stored, written, err := bundle.store.Put(ctx, r)
				if err != nil {
					t.Errorf("put final: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if written {
					winners = append(winners, stored)
				}
				seen = append(seen, stored)
			}()
		}
		close(start)
		wg.Wait()

		require.Len(t, winners, 1, "exactly one final write must win")
		got, err := bundle.store.Get(ctx, "race")
		require.NoError(t, err)
		require.Equal(t, winners[0], got)
		require.Len(t, seen, workers)
		for _, s := range seen {
			require.Equal(t, winners[0], s, "every writer must learn the one final result")
		}
	})

	t.Run("CreateIsSetNX", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		first := jobs.Result{ID: "c", Status: jobs.StatusQueued, Lang: "python"}
		stored, written, err := bundle.store.Create(ctx, first)
		require.NoError(t, err)
		require.True(t, written)
		require.Equal(t, first, stored)

		stored, written, err = bundle.store.Create(ctx, jobs.Result{ID: "c", Status: jobs.StatusQueued, Lang: "go"})
		require.NoError(t, err)
		require.False(t, written)
		require.Equal(t, first, stored)

		require.NoError(t, bundle.store.DeleteIfUnchanged(ctx, jobs.Result{ID: "c", Status: jobs.StatusQueued, Lang: "go"}))
		_, err = bundle.store.Get(ctx, "c")
		require.NoError(t, err, "deleteIfUnchanged deleted a different value")
		require.NoError(t, bundle.store.DeleteIfUnchanged(ctx, first))
		_, err = bundle.store.Get(ctx, "c")
		require.ErrorIs(t, err, jobs.ErrNotFound)
	})

	t.Run("PutRefusesBadResults", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, _, err := bundle.store.Put(ctx, jobs.Result{ID: "a b", Status: jobs.StatusFailed})
		require.EqualError(t, err, `store: put result: invalid job ID "a b"`)
		_, _, err = bundle.store.Put(ctx, jobs.Result{ID: "j", Status: "done"})
		require.EqualError(t, err, `store: put result: job j: unknown status "done"`)
	})

	t.Run("FinalPublishedOnDoneChannel", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		ps, err := bundle.store.subscribe(ctx, bundle.store.DoneChannel("p"))
		require.NoError(t, err)
		defer ps.Close()
		require.Equal(t, bundle.store.prefix+":done:p", bundle.store.DoneChannel("p"))

		_, _, err = bundle.store.Put(ctx, jobs.Result{ID: "p", Status: jobs.StatusRunning})
		require.NoError(t, err)
		final := jobs.Result{ID: "p", Status: jobs.StatusFailed, Reason: "exit 1"}
		_, _, err = bundle.store.Put(ctx, final)
		require.NoError(t, err)

		// Only the final write is published, so the first message is it.
		// A small Result travels whole, as stored: the waiter need not
		// read it.
		msg, err := ps.ReceiveMessage(ctx)
		require.NoError(t, err)
		got, ok := bundle.store.NoticeResult("p", msg.Payload)
		require.True(t, ok, "notice %q", msg.Payload)
		stored, err := bundle.store.Get(ctx, "p")
		require.NoError(t, err)
		require.Equal(t, stored, got)
		require.Equal(t, "exit 1", got.Reason)
		_, ok = bundle.store.NoticeResult("q", msg.Payload)
		require.False(t, ok, "another job's notice")

		// A large one's notice is its status alone: a Result of any size
		// never passes through a subscriber's buffer.
		ps2, err := bundle.store.subscribe(ctx, bundle.store.DoneChannel("big"))
		require.NoError(t, err)
		defer ps2.Close()
		big := jobs.Result{ID: "big", Status: jobs.StatusSucceeded, Output: jobs.Output{Stdout: strings.Repeat("x", NoticeResultMax)}}
		_, _, err = bundle.store.Put(ctx, big)
		require.NoError(t, err)
		msg, err = ps2.ReceiveMessage(ctx)
		require.NoError(t, err)
		require.Equal(t, "succeeded", msg.Payload)
		_, ok = bundle.store.NoticeResult("big", msg.Payload)
		require.False(t, ok)
		for _, bad := range []string{"", "{", `{"id":"p","status":"running"}`, `{"id":"p","status":"nope"}`} {
			_, ok = bundle.store.NoticeResult("p", bad)
			require.False(t, ok, "notice %q", bad)
		}
	})

	t.Run("Cancels", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		wctx, cancel := context.WithCancel(ctx)
		ids, err := bundle.store.WatchCancels(wctx)
		require.NoError(t, err)

		requested, err := bundle.store.CancelRequested(ctx, "k")
		require.NoError(t, err)
		require.False(t, requested)

		require.NoError(t, bundle.store.RequestCancel(ctx, "k"))
		require.Equal(t, "k", <-ids)
		requested, err = bundle.store.CancelRequested(ctx, "k")
		require.NoError(t, err)
		require.True(t, requested)

		cancel()
		for range ids {
			// Drain until WatchCancels closes the channel on ctx end.
		}
	})

	t.Run("ConfigValidation", func(t *testing.T) {
		t.Parallel()

		rdb := redistest.NewNamespace(t, "store").RDB
		_, err := New(rdb, Config{Prefix: "has space"})
		require.EqualError(t, err, `store: config: Prefix "has space" has whitespace, control characters or braces (but as one whole hash tag, {name})`)
		for _, bad := range []string{"a{b}", "{a}b", "{a{b}}", "{}", "{a"} {
			_, err = New(rdb, Config{Prefix: bad})
			require.Error(t, err, bad)
		}
		_, err = New(rdb, Config{Prefix: "{sandq}"})
		require.NoError(t, err, "one whole hash tag")
		_, err = New(rdb, Config{ResultTTL: time.Millisecond})
		require.EqualError(t, err, "store: config: ResultTTL 1ms is under 1s")
		_, err = New(nil, Config{})
		require.EqualError(t, err, "store: new: nil redis client")
		s, err := New(rdb, Config{})
		require.NoError(t, err)
		require.Equal(t, "sandq:result:x", s.ResultKey("x"))
		require.Equal(t, "sandq:cancel", s.CancelChannel())
		require.Equal(t, "sandq:cancel:x", s.CancelKey("x"))
		require.Equal(t, DefaultResultTTL, s.ttl)
	})
}
