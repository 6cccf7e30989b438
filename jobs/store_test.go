package jobs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
		rdb := testRedis(t)
		ns := newTestNamespace(t, rdb)
		store, err := NewStore(rdb, StoreConfig{Prefix: ns.Prefix, ResultTTL: time.Hour})
		require.NoError(t, err)
		return &testBundle{rdb: rdb, store: store}
	}

	t.Run("PlainJSONUnderDocumentedKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		code := 0
		r := Result{ID: "j1", Status: StatusSucceeded, ExitCode: &code, Output: Output{Stdout: "<hi>\n"}}
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

	t.Run("GetNotFound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.store.Get(ctx, "nope")
		require.ErrorIs(t, err, ErrNotFound)
		require.EqualError(t, err, "jobs: get result nope: jobs: job not found")
	})

	t.Run("NonFinalOverwritesNonFinal", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		for _, r := range []Result{
			{ID: "j", Status: StatusQueued},
			{ID: "j", Status: StatusRunning, Attempts: 1, Worker: "w1"},
			{ID: "j", Status: StatusRunning, Attempts: 2, Worker: "w2"},
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

		final := Result{ID: "j", Status: StatusTimeout, Reason: "limits.timeout_ms 10 expired", Worker: "w1"}
		_, written, err := bundle.store.Put(ctx, final)
		require.NoError(t, err)
		require.True(t, written)

		for _, late := range []Result{
			{ID: "j", Status: StatusRunning, Worker: "w2"},
			{ID: "j", Status: StatusSucceeded, Worker: "w2"},
			{ID: "j", Status: StatusQueued},
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

		_, _, err := bundle.store.Put(ctx, Result{ID: "race", Status: StatusRunning})
		require.NoError(t, err)

		const workers = 32
		statuses := []Status{StatusSucceeded, StatusFailed, StatusCanceled, StatusInternalError}
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []Result
			seen    []Result
		)
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := Result{ID: "race", Status: statuses[i%len(statuses)], Worker: fmt.Sprintf("w%d", i)}
				if i%3 == 0 {
					// Interleave late non-final writes too.
					if _, _, err := bundle.store.Put(ctx, Result{ID: "race", Status: StatusRunning, Worker: r.Worker}); err != nil {
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

		first := Result{ID: "c", Status: StatusQueued, Lang: "python"}
		stored, written, err := bundle.store.Create(ctx, first)
		require.NoError(t, err)
		require.True(t, written)
		require.Equal(t, first, stored)

		stored, written, err = bundle.store.Create(ctx, Result{ID: "c", Status: StatusQueued, Lang: "go"})
		require.NoError(t, err)
		require.False(t, written)
		require.Equal(t, first, stored)

		require.NoError(t, bundle.store.deleteIfUnchanged(ctx, Result{ID: "c", Status: StatusQueued, Lang: "go"}))
		_, err = bundle.store.Get(ctx, "c")
		require.NoError(t, err, "deleteIfUnchanged deleted a different value")
		require.NoError(t, bundle.store.deleteIfUnchanged(ctx, first))
		_, err = bundle.store.Get(ctx, "c")
		require.ErrorIs(t, err, ErrNotFound)
	})

	t.Run("PutRefusesBadResults", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, _, err := bundle.store.Put(ctx, Result{ID: "a b", Status: StatusFailed})
		require.EqualError(t, err, `jobs: put result: invalid job ID "a b"`)
		_, _, err = bundle.store.Put(ctx, Result{ID: "j", Status: "done"})
		require.EqualError(t, err, `jobs: put result: job j: unknown status "done"`)
	})

	t.Run("FinalPublishedOnDoneChannel", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		ps, err := bundle.store.subscribe(ctx, bundle.store.DoneChannel("p"))
		require.NoError(t, err)
		defer ps.Close()
		require.Equal(t, bundle.store.prefix+":done:p", bundle.store.DoneChannel("p"))

		_, _, err = bundle.store.Put(ctx, Result{ID: "p", Status: StatusRunning})
		require.NoError(t, err)
		final := Result{ID: "p", Status: StatusFailed, Reason: "exit 1"}
		_, _, err = bundle.store.Put(ctx, final)
		require.NoError(t, err)

		// Only the final write is published, so the first message is it,
		// and it carries the status alone: a Result of any size never
		// passes through a subscriber's buffer.
		msg, err := ps.ReceiveMessage(ctx)
		require.NoError(t, err)
		require.Equal(t, "failed", msg.Payload)
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

		rdb := testRedis(t)
		_, err := NewStore(rdb, StoreConfig{Prefix: "has space"})
		require.EqualError(t, err, `jobs: config: Prefix "has space" has whitespace, control characters or braces (but as one whole hash tag, {name})`)
		for _, bad := range []string{"a{b}", "{a}b", "{a{b}}", "{}", "{a"} {
			_, err = NewStore(rdb, StoreConfig{Prefix: bad})
			require.Error(t, err, bad)
		}
		_, err = NewStore(rdb, StoreConfig{Prefix: "{sandq}"})
		require.NoError(t, err, "one whole hash tag")
		_, err = NewStore(rdb, StoreConfig{ResultTTL: time.Millisecond})
		require.EqualError(t, err, "jobs: config: ResultTTL 1ms is under 1s")
		_, err = NewStore(nil, StoreConfig{})
		require.EqualError(t, err, "jobs: new store: nil redis client")
		s, err := NewStore(rdb, StoreConfig{})
		require.NoError(t, err)
		require.Equal(t, "sandq:result:x", s.ResultKey("x"))
		require.Equal(t, "sandq:cancel", s.CancelChannel())
		require.Equal(t, "sandq:cancel:x", s.CancelKey("x"))
		require.Equal(t, DefaultResultTTL, s.ttl)
	})
}
