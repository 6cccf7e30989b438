package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// TestWaitsShareOneConnection: concurrent Waits, two on each of ten jobs,
// hold one pub/sub connection with one subscription per job, and give it
// up as they return.
func TestWaitsShareOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := redistest.NewNamespace(t, "waiters")
	name := strings.ReplaceAll(ns.Prefix, ":", "-") + "-waiters"
	opts := ns.RDB.Options()
	opts.ClientName = name // on every connection, pub/sub ones too
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(Config{Redis: rdb, Prefix: ns.Prefix, QueuePrefix: ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	const jobsN, perJob = 10, 2
	ids := make([]string, jobsN)
	for i := range ids {
		info, err := c.Enqueue(ctx, jobs.Job{ID: fmt.Sprintf("j%d", i), Lang: "python", Code: "x"})
		require.NoError(t, err)
		ids[i] = info.ID
	}
	var blocked sync.WaitGroup
	blocked.Add(jobsN * perJob)
	c.waitBlocking = func(string) { blocked.Done() }
	results := make(chan jobs.Result, jobsN*perJob)
	errs := make(chan error, jobsN*perJob)
	for _, id := range ids {
		for range perJob {
			go func() {
				r, err := c.Wait(ctx, id)
				results <- r
				errs <- err
			}()
		}
	}
	allBlocked := make(chan struct{})
	go func() { blocked.Wait(); close(allBlocked) }()
	select {
	case <-allBlocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the Waits did not all subscribe")
	}

	// One pub/sub connection of this client, subscribed to ten channels.
	list, err := ns.RDB.ClientList(ctx).Result()
	require.NoError(t, err)
	var subs []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(line, " name="+name+" ") && !strings.Contains(line, " sub=0 ") {
			subs = append(subs, line)
		}
	}
	require.Len(t, subs, 1, "pub/sub connections of the client:\n%s", strings.Join(subs, "\n"))
	require.Contains(t, subs[0], fmt.Sprintf(" sub=%d ", jobsN))
	channel := func(id string) string { return c.Store().DoneChannel(id) }
	for _, id := range ids {
		n, err := ns.RDB.PubSubNumSub(ctx, channel(id)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n[channel(id)], id)
	}

	exit := 0
	for _, id := range ids {
		_, err := c.Store().PutFinal(ctx, jobs.Result{ID: id, Status: jobs.StatusSucceeded, ExitCode: &exit})
		require.NoError(t, err)
	}
	for range jobsN * perJob {
		require.NoError(t, <-errs)
		r := <-results
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.ID)
	}
	// The last waiter of each job unsubscribed.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			n, err := ns.RDB.PubSubNumSub(ctx, channel(id)).Result()
			if err != nil || n[channel(id)] != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
}

// TestWaitEndsWhenClientCloses: a blocked Wait returns an error when its
// Client is closed.
func TestWaitEndsWhenClientCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClientBundle(t)
	c, err := New(Config{Redis: b.rdb, Prefix: b.ns.Prefix, QueuePrefix: b.ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, jobs.Job{ID: "held", Lang: "python", Code: "x"})
	require.NoError(t, err)
	blocked := make(chan struct{})
	c.waitBlocking = func(string) { close(blocked) }
	done := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx, "held")
		done <- err
	}()
	<-blocked
	require.NoError(t, c.Close())
	select {
	case err := <-done:
		require.EqualError(t, err, "client: wait held: subscription closed")
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked after Close")
	}
}

// getCounter counts the GETs of one key.
type getCounter struct {
	key string
	n   int
	mu  sync.Mutex
}

func (g *getCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *getCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 2 && strings.EqualFold(fmt.Sprint(a[0]), "get") && a[1] == g.key {
			g.mu.Lock()
			g.n++
			g.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (g *getCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWaitReadsTheResultOnceBeforeAsynq: Wait on a job with no Result
// stored (unknown here) reads the Result, then asynq, then the Result
// again (it may have been stored between the two reads): two GETs, not
// the first read repeated by Get.
func TestWaitReadsTheResultOnceBeforeAsynq(t *testing.T) {
	t.Parallel()
	ns := redistest.NewNamespace(t, "waitget")
	opts := ns.RDB.Options()
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(Config{Redis: rdb, Prefix: ns.Prefix, QueuePrefix: ns.Prefix})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	g := &getCounter{key: c.store.ResultKey("nosuchjob")}
	rdb.AddHook(g)
	_, err = c.Wait(context.Background(), "nosuchjob")
	require.ErrorIs(t, err, jobs.ErrNotFound)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, 2, g.n)
}

// TestWaitTakesASmallResultFromItsNotice: a Wait blocked on a job whose
// small final Result is then stored returns the Result its notice carries,
// having read the key once (before it blocked); a large Result's notice is
// its status, and the Result is read.
func TestWaitTakesASmallResultFromItsNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := redistest.NewNamespace(t, "waitnotice")
	rdb := redis.NewClient(ns.RDB.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(Config{Redis: rdb, Prefix: ns.Prefix, QueuePrefix: ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	for _, tc := range []struct {
		id     string
		stdout string
		gets   int
	}{
		{"small", "1\n", 1},
		{"large", strings.Repeat("x", store.NoticeResultMax), 2},
	} {
		_, err = c.Enqueue(ctx, jobs.Job{ID: tc.id, Lang: "python", Code: "x"})
		require.NoError(t, err)
		g := &getCounter{key: c.store.ResultKey(tc.id)}
		rdb.AddHook(g)
		final := jobs.Result{ID: tc.id, Status: jobs.StatusSucceeded, Output: jobs.Output{Stdout: tc.stdout}}
		c.waitBlocking = func(id string) {
			if id == tc.id {
				_, _, err := c.store.Put(ctx, final)
				assert.NoError(t, err)
			}
		}
		r, err := c.Wait(ctx, tc.id)
		require.NoError(t, err)
		require.Equal(t, jobs.StatusSucceeded, r.Status, tc.id)
		require.Equal(t, tc.stdout, r.Stdout, tc.id)
		g.mu.Lock()
		require.Equal(t, tc.gets, g.n, "%s: GETs of the Result", tc.id)
		g.mu.Unlock()
	}
}
