package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

const (
	// settleInterval is how often a worker settles archived tasks.
	settleInterval = time.Minute
	// archivePage is how many archived tasks settleAll lists at a time.
	archivePage = 100
)

// archiveSettler gives every task asynq holds archived on sandq's queues a
// stored final Result, then deletes the task, so no job's payload (up to
// 11 MiB of code and files) stays in Redis for asynq's 90-day archive.
//
// Handlers end a job's task without an error once its final Result is
// stored, so asynq deletes it at once (no Retention is used). A task is
// archived only when no final Result could be stored: a worker died on
// the job's last attempt, or Redis failed it throughout. For each one,
// the settler stores what client.Client.Get reports (internal_error with
// asynq's last error, or canceled when a cancel was requested; first
// final wins, so a Result a worker stored meanwhile is kept) and deletes
// the task. Every worker runs it; two at once are harmless.
type archiveSettler struct {
	// client reads a job as a producer would (Get) and stores its Result
	// (Store().Put).
	client    *client.Client
	inspector *asynq.Inspector
	// queuePrefix is the asynq queue prefix (store.AsynqQueue).
	queuePrefix string
	// ticks, if set, replaces the ticker of settleInterval (tests drive
	// the loop).
	ticks <-chan time.Time
	log   zerolog.Logger

	settled testSignal[int] // after each round, with the tasks it settled
}

// run settles at once, then every settleInterval, until ctx ends.
func (a *archiveSettler) run(ctx context.Context) {
	ticks := a.ticks
	if ticks == nil {
		t := time.NewTicker(settleInterval)
		defer t.Stop()
		ticks = t.C
	}
	for {
		n, err := a.settleAll(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil || n > 0 {
			a.log.Err(err).Int("settled", n).Msg("archived tasks settled: final results stored, payloads deleted")
		}
		a.settled.signal(n)
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}

// settleAll settles every archived task of sandq's queues and returns how
// many it deleted.
func (a *archiveSettler) settleAll(ctx context.Context) (int, error) {
	settled := 0
	for _, q := range jobs.Queues() {
		queue := store.AsynqQueue(a.queuePrefix, q)
		for {
			// Always page 1: settled tasks leave the list.
			tasks, err := a.inspector.ListArchivedTasks(queue, asynq.PageSize(archivePage), asynq.Page(1))
			if errors.Is(err, asynq.ErrQueueNotFound) {
				break
			}
			if err != nil {
				return settled, fmt.Errorf("worker: list archived tasks of %s: %w", queue, err)
			}
			n := 0
			for _, t := range tasks {
				ok, err := a.settle(ctx, queue, t.ID)
				if err != nil {
					return settled, err
				}
				if ok {
					settled++
					n++
				}
			}
			if len(tasks) < archivePage || n == 0 {
				break
			}
		}
	}
	return settled, nil
}

// settle stores job id's final Result and deletes its archived task. It
// reports false for a task that is not a sandq job or is no longer
// archived.
func (a *archiveSettler) settle(ctx context.Context, queue, id string) (bool, error) {
	if !jobs.ValidID(id) {
		return false, nil
	}
	r, err := a.client.Get(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !r.Status.Final() {
		return false, nil // retried meanwhile (asynq's RunTask)
	}
	if _, _, err := a.client.Store().Put(ctx, r); err != nil {
		return false, err
	}
	err = a.inspector.DeleteTask(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("worker: delete archived task %s: %w", id, err)
	}
	return true, nil
}
