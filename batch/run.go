// Package batch runs many jobs as one batch, for any producer: enqueue
// them in chunks, await every result over one Redis subscription, start
// waiting again after a Redis failure without losing or repeating a job,
// and derive stable job IDs from the jobs' content so that running the same
// input again resumes it. The CLI (`enqueue batch`, `enqueue eval`) builds
// on it and keeps its own output and display. A tenant's batch over the
// HTTP API (a record of its jobs, its progress, its results as they end)
// is package service's, over the same client calls.
package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/sandq/sandq/client"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandq/sandq/jobs"
)

// Client is what a batch needs of client.Client.
type Client interface {
	EnqueueBatch(ctx context.Context, js []jobs.Job) ([]client.EnqueueInfo, error)
	WaitEach(ctx context.Context, ids <-chan string, fn func(jobs.Result) error) error
}

var _ Client = (*client.Client)(nil)

// Config tunes Run. Zero fields take their defaults.
type Config struct {
	// Chunk is how many jobs one EnqueueBatch call (one pipelined round
	// trip of claims) carries. Default 500.
	Chunk int
	// Retries is how many times in a row waiting may fail (Redis
	// unreachable) and be started again, with backoff from 1 s, before
	// the batch gives up. Default 5.
	Retries int
}

func (c Config) withDefaults() Config {
	c.Chunk = cmp.Or(c.Chunk, 500)
	c.Retries = cmp.Or(c.Retries, 5)
	return c
}

// Counts says how the jobs of one run reached their results.
type Counts struct {
	// Enqueued counts jobs new to sandq; Existing jobs it knew already
	// (enqueued by an interrupted run, or finished within the result TTL).
	Enqueued, Existing int
	// FromRedis counts existing jobs that were already final: their stored
	// Result was written without running anything.
	FromRedis int
}

// emitError marks an error of Run's emit, which ends the batch.
type emitError struct{ err error }

func (e emitError) Error() string { return e.err.Error() }
func (e emitError) Unwrap() error { return e.err }

// Run enqueues todo (every job with its ID set, IDs unique) in chunks
// and calls emit with each job's final Result as it arrives, serially and
// once per ID. It returns when every job has been emitted, or at the first
// error (from Redis or emit), or when ctx ends (with its cause). Jobs
// already enqueued go on running in either case: a rerun awaits them
// again, because Enqueue with an existing ID is idempotent.
//
// One goroutine enqueues; the jobs are awaited as they are enqueued by
// one client.Client.WaitEach, over one Redis pub/sub connection whatever
// the number of jobs. If waiting fails (Redis unreachable), it starts
// again, with backoff, for the jobs not emitted yet.
func Run(ctx context.Context, c Client, cfg Config, todo []jobs.Job, emit func(jobs.Result) error) (Counts, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var (
		counts Counts
		mu     sync.Mutex // guards counts, finalAtEnqueue
		// finalAtEnqueue holds the existing jobs already final when
		// enqueued, to count FromRedis.
		finalAtEnqueue = map[string]bool{}
	)
	enqueued := make(chan string, len(todo))
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(enqueued)
		for start := 0; start < len(todo); start += cfg.Chunk {
			chunk := todo[start:min(start+cfg.Chunk, len(todo))]
			infos, err := c.EnqueueBatch(ctx, chunk)
			if err != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("enqueue: %w", err))
			}
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			for _, info := range infos {
				if info.Existing {
					counts.Existing++
				} else {
					counts.Enqueued++
				}
				if info.Existing && info.Status.Final() {
					finalAtEnqueue[info.ID] = true
				}
			}
			mu.Unlock()
			for _, info := range infos {
				enqueued <- info.ID
			}
		}
	})

	// w feeds the IDs of enqueued to WaitEach, and again the IDs an
	// earlier WaitEach had not emitted when it failed.
	w := &waiter{inflight: map[string]bool{}}
	backoff := time.Second
	for failures := 0; ; {
		emittedBefore := w.emitted
		err := w.wait(ctx, c, enqueued, func(r jobs.Result) error {
			mu.Lock()
			if finalAtEnqueue[r.ID] {
				counts.FromRedis++
			}
			mu.Unlock()
			if err := emit(r); err != nil {
				return emitError{err}
			}
			return nil
		})
		if err == nil || ctx.Err() != nil {
			break
		}
		var ee emitError
		switch {
		case errors.As(err, &ee):
			cancel(ee.err)
		case errors.Is(err, jobs.ErrNotFound):
			cancel(fmt.Errorf("a job vanished from Redis (flushed, or its result expired): %w", err))
		}
		if ctx.Err() != nil {
			break
		}
		if w.emitted > emittedBefore {
			failures, backoff = 0, time.Second
		}
		if failures++; failures > cfg.Retries {
			cancel(fmt.Errorf("wait for results: %w", err))
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	err := context.Cause(ctx)
	if ctx.Err() == nil {
		err = nil // every job emitted
	}
	cancel(nil) // stops the enqueuer if waiting failed
	wg.Wait()
	return counts, err
}

// waiter runs client.Client.WaitEach for a batch, again after a
// failure, without losing or repeating a job: the batch's IDs are unique,
// WaitEach passes each ID's Result once, and a wait started again gets
// only the IDs not emitted before.
type waiter struct {
	// emitted counts the Results passed to emit; only wait's goroutine
	// uses it.
	emitted int
	mu      sync.Mutex
	// inflight holds the IDs handed to WaitEach and not emitted yet.
	inflight map[string]bool
}

// wait awaits the IDs of an earlier wait that were not emitted, then those
// received from enqueued, and passes each final Result to emit once.
func (w *waiter) wait(ctx context.Context, c Client, enqueued <-chan string, emit func(jobs.Result) error) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	w.mu.Lock()
	retry := slices.Collect(maps.Keys(w.inflight))
	w.mu.Unlock()
	ids := make(chan string)
	var fwd sync.WaitGroup
	fwd.Go(func() {
		defer close(ids)
		for _, id := range retry {
			select {
			case ids <- id:
			case <-ctx.Done():
				return
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case id, ok := <-enqueued:
				if !ok {
					return
				}
				// Recorded before it is handed over, so a failed wait
				// cannot lose it.
				w.mu.Lock()
				w.inflight[id] = true
				w.mu.Unlock()
				select {
				case ids <- id:
				case <-ctx.Done():
					return
				}
			}
		}
	})
	err := c.WaitEach(ctx, ids, func(r jobs.Result) error {
		w.emitted++
		w.mu.Lock()
		delete(w.inflight, r.ID)
		w.mu.Unlock()
		return emit(r)
	})
	stop()
	fwd.Wait()
	return err
}
