// Package jobstest holds test support for producers of jobs: a private
// namespace in the real Redis, and a fake worker fleet that stores results
// without running anything, so batch logic is tested without containers.
// Only tests import it.
package jobstest

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/internal/store"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// Namespace is one test's private part of the real Redis (see
// redistest.Namespace), with sandq's store on it.
type Namespace struct {
	*redistest.Namespace
	Store *store.Store
}

// NewNamespace connects to Redis, failing the test (never skipping it)
// when Redis does not answer.
func NewNamespace(t testing.TB, name string) *Namespace {
	t.Helper()
	n := &Namespace{Namespace: redistest.NewNamespace(t, name)}
	st, err := store.New(n.RDB, store.Config{Prefix: n.Prefix})
	require.NoError(t, err)
	n.Store = st
	return n
}

// Client returns a client.Client in the namespace.
func (n *Namespace) Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Redis: n.RDB, Prefix: n.Prefix, QueuePrefix: n.Prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
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
		Queues:            store.ServerQueues(n.Prefix),
		Concurrency:       4,
		TaskCheckInterval: 5 * time.Millisecond,
		Logger:            quietLogger{},
		ShutdownTimeout:   time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(store.TypeExec, func(ctx context.Context, task *asynq.Task) error {
		j, err := store.DecodeTask(task)
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
