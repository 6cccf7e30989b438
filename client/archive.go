package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"

	"github.com/hibiken/asynq"
)

// archivePage is how many archived tasks SettleArchived lists at a time.
const archivePage = 100

// SettleArchived gives every task asynq holds archived on sandq's queues a
// stored final Result, then deletes the task, so no job's payload (up to
// 11 MiB of code and files) stays in Redis for asynq's 90-day archive.
//
// Workers end a job's task without an error once its final Result is
// stored, so asynq deletes it at once (no Retention is used). A task is
// archived only when no final Result could be stored: a worker died on the
// job's last attempt, or Redis failed it throughout. For each one,
// SettleArchived stores what [Client.Get] reports (internal_error with
// asynq's last error, or canceled when a cancel was requested; first final
// wins, so a Result a worker stored meanwhile is kept) and deletes the
// task. It returns how many tasks it deleted. Every worker runs it
// periodically; running it twice at once is harmless.
func (c *Client) SettleArchived(ctx context.Context) (int, error) {
	settled := 0
	for _, q := range jobs.Queues() {
		queue := store.AsynqQueue(c.cfg.QueuePrefix, q)
		for {
			// Always page 1: settled tasks leave the list.
			tasks, err := c.inspector.ListArchivedTasks(queue, asynq.PageSize(archivePage), asynq.Page(1))
			if errors.Is(err, asynq.ErrQueueNotFound) {
				break
			}
			if err != nil {
				return settled, fmt.Errorf("client: list archived tasks of %s: %w", queue, err)
			}
			n := 0
			for _, t := range tasks {
				ok, err := c.settle(ctx, queue, t.ID)
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

// settle stores job id's final Result (see SettleArchived) and deletes its
// archived task. It reports false for a task that is not a sandq job or is
// no longer archived.
func (c *Client) settle(ctx context.Context, queue, id string) (bool, error) {
	if !jobs.ValidID(id) {
		return false, nil
	}
	r, err := c.Get(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !r.Status.Final() {
		return false, nil // retried meanwhile (asynq's RunTask)
	}
	if _, _, err := c.store.Put(ctx, r); err != nil {
		return false, err
	}
	err = c.inspector.DeleteTask(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("client: delete archived task %s: %w", id, err)
	}
	return true, nil
}
