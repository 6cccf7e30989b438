package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandq/sandq/jobs"
)

// batchClient is what a batch needs of jobs.Client.
type batchClient interface {
	EnqueueBatch(ctx context.Context, js []jobs.Job) ([]jobs.EnqueueInfo, error)
	Get(ctx context.Context, id string) (jobs.Result, error)
	Wait(ctx context.Context, id string) (jobs.Result, error)
}

var _ batchClient = (*jobs.Client)(nil)

// batchConfig tunes runBatch. Zero fields take their defaults.
type batchConfig struct {
	// Chunk is how many jobs one EnqueueBatch call (one pipelined round
	// trip of claims) carries. Default 500.
	Chunk int
	// Waiters bounds the jobs awaited at once, each with one pub/sub
	// subscription. Finished jobs are collected quickly, so this bounds
	// Redis connections, not throughput. Default 64.
	Waiters int
	// Recheck is how long one Wait may block before the job is looked up
	// again with Get: a job whose last worker died gets no final Result
	// stored and wakes no waiter, but Get reports it internal_error.
	// Default 1 min.
	Recheck time.Duration
	// Retries is how many times a failing Wait is retried (Redis
	// unreachable), with backoff from 1 s, before the batch gives up.
	// Default 5.
	Retries int
}

func (c batchConfig) withDefaults() batchConfig {
	c.Chunk = cmp.Or(c.Chunk, 500)
	c.Waiters = cmp.Or(c.Waiters, 64)
	c.Recheck = cmp.Or(c.Recheck, time.Minute)
	c.Retries = cmp.Or(c.Retries, 5)
	return c
}

// batchCounts says how the jobs of one run reached their results.
type batchCounts struct {
	// Enqueued counts jobs new to sandq; Existing jobs it knew already
	// (enqueued by an interrupted run, or finished within the result TTL).
	Enqueued, Existing int
	// FromRedis counts existing jobs that were already final: their stored
	// Result was written without running anything.
	FromRedis int
}

// errRecheck ends one Wait so the job is looked up again.
var errRecheck = errors.New("recheck")

// pendingJob is an enqueued job to await.
type pendingJob struct {
	id    string
	final bool // its Result was final when enqueued
}

// runBatch enqueues todo (every job with its ID set, IDs unique) in chunks
// and calls emit with each job's final Result as it arrives, serially and
// once per ID. It returns when every job has been emitted, or at the first
// error (from Redis or emit), or when ctx ends (with its cause). Jobs
// already enqueued go on running in either case: a rerun awaits them
// again, because Enqueue with an existing ID is idempotent.
//
// It uses one goroutine for enqueueing and cfg.Waiters for waiting,
// whatever the number of jobs.
func runBatch(ctx context.Context, c batchClient, cfg batchConfig, todo []jobs.Job, emit func(jobs.Result) error) (batchCounts, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var (
		counts  batchCounts
		mu      sync.Mutex // guards counts, emitted, and serializes emit
		emitted = make(map[string]bool, len(todo))
	)
	pending := make(chan pendingJob, len(todo))

	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(pending)
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
			}
			mu.Unlock()
			for _, info := range infos {
				pending <- pendingJob{id: info.ID, final: info.Status.Final()}
			}
		}
	})
	for range min(cfg.Waiters, len(todo)) {
		wg.Go(func() {
			for p := range pending {
				if ctx.Err() != nil {
					return
				}
				r, err := awaitJob(ctx, c, cfg, p)
				if err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				if !emitted[r.ID] {
					emitted[r.ID] = true
					if p.final {
						counts.FromRedis++
					}
					err = emit(r)
				}
				mu.Unlock()
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return counts, err
	}
	return counts, nil
}

// awaitJob returns job p's final Result: read at once if it was final at
// enqueue, otherwise waited for (no polling), with a Get every
// cfg.Recheck and retries with backoff when Redis fails.
func awaitJob(ctx context.Context, c batchClient, cfg batchConfig, p pendingJob) (jobs.Result, error) {
	if p.final {
		if r, err := c.Get(ctx, p.id); err == nil && r.Status.Final() {
			return r, nil
		}
	}
	backoff := time.Second
	for failures := 0; ; {
		wctx, cancel := context.WithTimeoutCause(ctx, cfg.Recheck, errRecheck)
		r, err := c.Wait(wctx, p.id)
		rechecking := errors.Is(context.Cause(wctx), errRecheck)
		cancel()
		switch {
		case err == nil:
			return r, nil
		case ctx.Err() != nil:
			return jobs.Result{}, context.Cause(ctx)
		case errors.Is(err, jobs.ErrNotFound):
			return jobs.Result{}, fmt.Errorf("job %s vanished from Redis (flushed, or its result expired): %w", p.id, err)
		case rechecking:
			if r, err := c.Get(ctx, p.id); err == nil && r.Status.Final() {
				return r, nil
			}
			continue
		}
		if failures++; failures > cfg.Retries {
			return jobs.Result{}, fmt.Errorf("wait for job %s: %w", p.id, err)
		}
		select {
		case <-ctx.Done():
			return jobs.Result{}, context.Cause(ctx)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}
