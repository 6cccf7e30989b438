package client

import (
	"fmt"
	"slices"

	"github.com/hibiken/asynq"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// QueueInfo is one logical queue as asynq counts it.
type QueueInfo struct {
	Queue jobs.Queue
	// Info is asynq's; nil when the queue does not exist yet (nothing was
	// ever enqueued on it).
	Info *asynq.QueueInfo
}

// Queues returns asynq's counts of the client's queues (pending, active,
// retrying, archived, processed and failed today, latency).
func (c *Client) Queues() ([]QueueInfo, error) {
	names, err := c.inspector.Queues()
	if err != nil {
		return nil, fmt.Errorf("client: list queues: %w", err)
	}
	var out []QueueInfo
	for _, q := range jobs.Queues() {
		name := store.AsynqQueue(c.cfg.QueuePrefix, q)
		qi := QueueInfo{Queue: q}
		if slices.Contains(names, name) {
			if qi.Info, err = c.inspector.GetQueueInfo(name); err != nil {
				return nil, fmt.Errorf("client: queue %s: %w", name, err)
			}
		}
		out = append(out, qi)
	}
	return out, nil
}

// Servers returns the asynq servers (sandq workers) that serve one of the
// client's queues, with their concurrency and the tasks they run now, as
// asynq's heartbeats record them.
func (c *Client) Servers() ([]*asynq.ServerInfo, error) {
	all, err := c.inspector.Servers()
	if err != nil {
		return nil, fmt.Errorf("client: list servers: %w", err)
	}
	var out []*asynq.ServerInfo
	for _, s := range all {
		for _, q := range jobs.Queues() {
			if _, ok := s.Queues[store.AsynqQueue(c.cfg.QueuePrefix, q)]; ok {
				out = append(out, s)
				break
			}
		}
	}
	return out, nil
}
