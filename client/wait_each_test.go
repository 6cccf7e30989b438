package client

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"

	"github.com/stretchr/testify/require"
)

func TestWaitEach(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	setup := newClientBundle

	// enqueue enqueues n jobs with IDs prefix0, prefix1, ... and returns
	// the IDs.
	enqueue := func(t *testing.T, b *clientBundle, prefix string, n int) []string {
		t.Helper()
		js := make([]jobs.Job, n)
		ids := make([]string, n)
		for i := range js {
			ids[i] = prefix + strconv.Itoa(i)
			js[i] = jobs.Job{ID: ids[i], Lang: "python", Code: "print(1)"}
		}
		infos, err := b.client.EnqueueBatch(ctx, js)
		require.NoError(t, err)
		for _, info := range infos {
			require.NoError(t, info.Err)
		}
		return ids
	}

	finish := func(t *testing.T, b *clientBundle, ids ...string) {
		t.Helper()
		for _, id := range ids {
			exit := 0
			_, written, err := b.client.Store().Put(ctx, jobs.Result{ID: id, Status: jobs.StatusSucceeded, ExitCode: &exit, Output: jobs.Output{Stdout: id}})
			require.NoError(t, err)
			require.True(t, written)
		}
	}

	// run starts WaitEach on ids and returns a channel of the Results it
	// passes to fn and one of its error.
	run := func(b *clientBundle, ids <-chan string) (<-chan jobs.Result, <-chan error) {
		results := make(chan jobs.Result, 10_000)
		errc := make(chan error, 1)
		go func() {
			errc <- b.client.WaitEach(ctx, ids, func(r jobs.Result) error {
				results <- r
				return nil
			})
		}()
		return results, errc
	}

	send := func(ids ...string) <-chan string {
		ch := make(chan string, len(ids))
		for _, id := range ids {
			ch <- id
		}
		close(ch)
		return ch
	}

	// subscriber returns the Redis client ID of the pub/sub connection
	// subscribed to exactly n channels of this test (found by counting
	// each connection's subscriptions: no other test holds n of them),
	// once there is one.
	subscriber := func(t *testing.T, b *clientBundle, n int) string {
		t.Helper()
		var id string
		require.Eventually(t, func() bool {
			list, err := b.rdb.ClientList(ctx).Result()
			require.NoError(t, err)
			for line := range strings.SplitSeq(list, "\n") {
				fields := map[string]string{}
				for f := range strings.FieldsSeq(line) {
					k, v, _ := strings.Cut(f, "=")
					fields[k] = v
				}
				if fields["sub"] == strconv.Itoa(n) {
					id = fields["id"]
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "no connection subscribed to %d channels", n)
		return id
	}

	collect := func(t *testing.T, results <-chan jobs.Result, n int) map[string]jobs.Result {
		t.Helper()
		got := map[string]jobs.Result{}
		deadline := time.After(15 * time.Second)
		for len(got) < n {
			select {
			case r := <-results:
				_, dup := got[r.ID]
				require.False(t, dup, "result of %s passed to fn twice", r.ID)
				got[r.ID] = r
			case <-deadline:
				t.Fatalf("got %d of %d results", len(got), n)
			}
		}
		return got
	}

	t.Run("ManyJobsOneConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		const n = 300
		ids := enqueue(t, b, "many", n)
		finish(t, b, ids[0]) // final before the wait starts
		in := make(chan string, 2*n)
		for _, id := range ids {
			in <- id
		}
		in <- ids[5] // a duplicate is awaited once
		results, errc := run(b, in)

		require.Equal(t, ids[0], (<-results).ID)
		// Every other job is subscribed on one connection.
		conn := subscriber(t, b, n-1)
		finish(t, b, ids[1:150]...)
		got := collect(t, results, 149)
		for _, id := range ids[1:150] {
			require.Equal(t, jobs.StatusSucceeded, got[id].Status)
			require.Equal(t, id, got[id].Output.Stdout)
		}
		// Done jobs are unsubscribed.
		require.Equal(t, conn, subscriber(t, b, n-150))

		finish(t, b, ids[150:]...)
		close(in)
		collect(t, results, n-150)
		require.NoError(t, <-errc)
		require.Empty(t, results, "no result passed twice")
	})

	t.Run("ResultsStoredWhileReconnecting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.client.waitRecheck = time.Hour // only the resubscription can see them

		const n = 40
		ids := enqueue(t, b, "gap", n)
		results, errc := run(b, send(ids...))
		conn := subscriber(t, b, n)
		// The published Results are lost with the connection; go-redis
		// reconnects and subscribes again, and the Results are read.
		require.NoError(t, b.rdb.ClientKillByFilter(ctx, "ID", conn).Err())
		finish(t, b, ids...)
		got := collect(t, results, n)
		require.Len(t, got, n)
		require.NoError(t, <-errc)
	})

	t.Run("ArchivedWithoutResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.client.waitRecheck = 20 * time.Millisecond

		// Two workers died on their jobs' last attempts: one after storing
		// running, one before. No final Result is ever published.
		ids := enqueue(t, b, "orphan", 3)
		_, _, err := b.client.Store().Put(ctx, jobs.Result{ID: ids[0], Status: jobs.StatusRunning, Attempts: 4, Worker: "w1"})
		require.NoError(t, err)
		results, errc := run(b, send(ids...))
		subscriber(t, b, 3)
		for _, id := range ids[:2] {
			require.NoError(t, b.inspector.ArchiveTask(store.AsynqQueue(b.ns.Prefix, jobs.QueueDefault), id))
		}
		finish(t, b, ids[2])
		got := collect(t, results, 3)
		require.NoError(t, <-errc)
		for _, id := range ids[:2] {
			require.Equal(t, jobs.StatusInternalError, got[id].Status, id)
			require.Equal(t, "retries exhausted without a result", got[id].Reason, id)
		}
		require.Equal(t, jobs.StatusSucceeded, got[ids[2]].Status)
	})

	t.Run("UnknownID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		ids := enqueue(t, b, "known", 1)
		_, errc := run(b, send(ids[0], "ghost"))
		err := <-errc
		require.ErrorIs(t, err, jobs.ErrNotFound)
		require.ErrorContains(t, err, "ghost")
	})

	t.Run("StopsAtFnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		ids := enqueue(t, b, "fn", 2)
		finish(t, b, ids...)
		var mu sync.Mutex
		calls := 0
		err := b.client.WaitEach(ctx, send(ids...), func(jobs.Result) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			return fmt.Errorf("disk full")
		})
		require.EqualError(t, err, "disk full")
		require.Equal(t, 1, calls)
	})

	t.Run("EndsWithContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		ids := enqueue(t, b, "slow", 1)
		wctx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, fmt.Errorf("caller gave up"))
		defer cancel()
		err := b.client.WaitEach(wctx, send(ids...), func(jobs.Result) error { return nil })
		require.EqualError(t, err, "client: wait: caller gave up")
	})

	t.Run("NothingToAwait", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		require.NoError(t, b.client.WaitEach(ctx, send(), func(jobs.Result) error {
			return fmt.Errorf("fn called without a job")
		}))
	})
}
