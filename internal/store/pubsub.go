package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// subscribe subscribes to channel and waits for Redis to confirm, so that
// no message published after it returns is missed.
func (s *Store) subscribe(ctx context.Context, channel string) (*redis.PubSub, error) {
	ps := s.rdb.Subscribe(ctx, channel)
	msg, err := ps.Receive(ctx)
	if err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe %s: %w", channel, err)
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe %s: unexpected reply %T", channel, msg)
	}
	return ps, nil
}

// SubscribeDone subscribes to job id's done channel and returns once Redis
// has confirmed it.
func (s *Store) SubscribeDone(ctx context.Context, id string) (*redis.PubSub, error) {
	return s.subscribe(ctx, s.DoneChannel(id))
}

// PubSub returns a pub/sub connection subscribed to nothing yet, for a
// waiter of many jobs (SubscribeDone's channels by DoneChannel).
func (s *Store) PubSub(ctx context.Context) *redis.PubSub { return s.rdb.Subscribe(ctx) }

// SubscribeAllDone pattern-subscribes to every job's done channel: one
// connection for a process's waiters (DoneID names the job of a message).
func (s *Store) SubscribeAllDone(ctx context.Context) *redis.PubSub {
	return s.rdb.PSubscribe(ctx, s.donePattern())
}

// DoneID returns the job ID of a done channel's name, and false for
// another channel.
func (s *Store) DoneID(channel string) (string, bool) {
	return strings.CutPrefix(channel, s.DoneChannel(""))
}

// NoticeResultMax is the largest Result, in bytes of its JSON, published
// whole on its job's done channel; a larger one's notice is its status.
// It bounds what a notice adds to a subscriber's output buffer: the API's
// hub hears every job's.
const NoticeResultMax = 4 << 10

// NoticeResult returns the final Result of job id that a message on its
// done channel carries, and false for a notice that carries only a status
// (or anything else): the Result is then to be read.
func (s *Store) NoticeResult(id, payload string) (jobs.Result, bool) {
	if !strings.HasPrefix(payload, "{") {
		return jobs.Result{}, false
	}
	r, err := decodeResult(id, []byte(payload))
	if err != nil || r.ID != id || !r.Status.Final() {
		return jobs.Result{}, false
	}
	return r, true
}
