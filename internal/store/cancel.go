package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequestCancel marks job id as canceled (key "<prefix>:cancel:<id>") and
// publishes id on the cancel channel, so that the worker running it kills
// the program and a worker that picks it up later does not start it.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.CancelKey(id), time.Now().UTC().Format(time.RFC3339Nano), s.ttl)
		p.Publish(ctx, s.CancelChannel(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: request cancel %s: %w", id, err)
	}
	return nil
}

// CancelRequested reports whether a producer canceled job id. A worker
// checks it when an attempt starts.
func (s *Store) CancelRequested(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.CancelKey(id)).Result()
	if err != nil {
		return false, fmt.Errorf("store: check cancel %s: %w", id, err)
	}
	return n > 0, nil
}

// WatchCancels subscribes to the cancel channel and returns the IDs of
// jobs canceled from now on. The subscription is active when WatchCancels
// returns. The channel is closed when ctx ends. Pub/sub is at-most-once: a
// cancel published while the connection is down is missed, which is why
// asynq's own cancel and the cancel key back it up.
func (s *Store) WatchCancels(ctx context.Context) (<-chan string, error) {
	ps, err := s.subscribe(ctx, s.CancelChannel())
	if err != nil {
		return nil, fmt.Errorf("store: watch cancels: %w", err)
	}
	out := make(chan string)
	go func() {
		defer close(out)
		defer ps.Close()
		msgs := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
