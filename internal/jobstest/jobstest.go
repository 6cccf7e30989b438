// Package jobstest holds test support for producers of jobs: a private
// namespace in the real Redis, and a fake worker fleet that stores results
// without running anything, so batch logic is tested without containers.
// Only tests import it.
package jobstest

import (
	"cmp"
	"context"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// Namespace is one test's private part of the real Redis at
// SANDQ_REDIS_ADDR (default 127.0.0.1:6379): a random key prefix, also used
// as the queue prefix. Its keys and queues are deleted when the test ends.
type Namespace struct {
	RDB    *redis.Client
	Addr   string
	Prefix string
	Store  *jobs.Store
}

// NewNamespace connects to Redis, failing the test (never skipping it)
// when Redis does not answer.
func NewNamespace(t testing.TB, name string) *Namespace {
	t.Helper()
	addr := cmp.Or(os.Getenv("SANDQ_REDIS_ADDR"), "127.0.0.1:6379")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("these tests need a real Redis at %s (set SANDQ_REDIS_ADDR to change it): %v", addr, err)
	}
	n := &Namespace{RDB: rdb, Addr: addr, Prefix: "sandqtest-" + name + "-" + jobs.NewID()[:12]}
	store, err := jobs.NewStore(rdb, jobs.StoreConfig{Prefix: n.Prefix})
	require.NoError(t, err)
	n.Store = store
	t.Cleanup(func() {
		n.cleanup(t)
		_ = rdb.Close()
	})
	return n
}

// Client returns a jobs.Client in the namespace.
func (n *Namespace) Client(t testing.TB) *jobs.Client {
	t.Helper()
	c, err := jobs.NewClient(jobs.Config{Redis: n.RDB, Prefix: n.Prefix, QueuePrefix: n.Prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (n *Namespace) cleanup(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insp := asynq.NewInspectorFromRedisClient(n.RDB)
	for _, q := range jobs.Queues() {
		_ = insp.DeleteQueue(jobs.AsynqQueue(n.Prefix, q), true) // ErrQueueNotFound: never used
	}
	if keys := n.Keys(t); len(keys) > 0 {
		if err := n.RDB.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup: del: %v", err)
		}
	}
}

// Keys lists the namespace's keys: its own and its asynq queues'.
func (n *Namespace) Keys(t testing.TB) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	for _, pattern := range []string{n.Prefix + ":*", "asynq:{" + n.Prefix + ":*"} {
		iter := n.RDB.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		require.NoError(t, iter.Err())
	}
	return keys
}

// FakeWorker stands in for the worker fleet: a real asynq server on the
// namespace's queues whose handler stores, for each job, a running then a
// final Result decided by its code: "# FAIL" fails, "# INFRA" ends
// internal_error, "# TIMEOUT" times out, anything else succeeds with the
// code as stdout. It counts the runs per job ID.
type FakeWorker struct {
	mu   sync.Mutex
	runs map[string]int
	srv  *asynq.Server
}

type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// StartFakeWorker starts a FakeWorker, stopped when the test ends.
func (n *Namespace) StartFakeWorker(t testing.TB) *FakeWorker {
	t.Helper()
	w := &FakeWorker{runs: map[string]int{}}
	w.srv = asynq.NewServerFromRedisClient(n.RDB, asynq.Config{
		Queues:            jobs.ServerQueues(n.Prefix),
		Concurrency:       4,
		TaskCheckInterval: 5 * time.Millisecond,
		Logger:            quietLogger{},
		ShutdownTimeout:   time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobs.TypeExec, func(ctx context.Context, task *asynq.Task) error {
		j, err := jobs.DecodeTask(task)
		if err != nil {
			return err
		}
		// As the real handler: a job whose final Result is stored already
		// (a duplicate task from a re-enqueued claim) is not run again.
		if _, written, err := n.Store.Put(ctx, jobs.Result{ID: j.ID, Status: jobs.StatusRunning, Tags: j.Tags}); err != nil || !written {
			return err
		}
		w.mu.Lock()
		w.runs[j.ID]++
		w.mu.Unlock()
		exit := 0
		r := jobs.Result{ID: j.ID, Status: jobs.StatusSucceeded, ExitCode: &exit, Lang: j.Lang, Queue: j.Queue, Tags: j.Tags,
			Attempts: 1, Worker: "fake", FinishedAt: time.Now().UTC()}
		r.Stdout = j.Code
		switch {
		case strings.Contains(j.Code, "# FAIL"):
			exit = 1
			r.Status, r.Stderr, r.Reason = jobs.StatusFailed, "Traceback\nAssertionError\n", "exit status 1"
		case strings.Contains(j.Code, "# INFRA"):
			r.Status, r.ExitCode, r.Reason = jobs.StatusInternalError, nil, "engine gone"
		case strings.Contains(j.Code, "# TIMEOUT"):
			r.Status, r.ExitCode, r.Reason = jobs.StatusTimeout, nil, "wall-clock limit"
		}
		_, _, err = n.Store.Put(ctx, r)
		return err
	})
	require.NoError(t, w.srv.Start(mux))
	t.Cleanup(w.srv.Shutdown)
	return w
}

// RunCounts returns how many times each job ran.
func (w *FakeWorker) RunCounts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.runs)
}
