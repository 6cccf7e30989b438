package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waking idle workers. asynq has no blocking pop: an idle server runs its
// dequeue script on each of its queues, finds them empty and sleeps its
// TaskCheckInterval. Polling often answers soon but loads Redis with empty
// scripts (every idle worker, all the time) and costs a busy worker an
// empty script per queue between jobs; polling rarely leaves a new job
// waiting. Instead, whoever enqueues a task publishes the task's asynq
// queue on WakeChannel (the Client, after asynq took the task), and a
// worker's DequeueGate, hooked on the Redis client its asynq server uses,
// keeps what each queue's last dequeue found:
//
//   - a queue found empty less than MaxWait ago, and woken since by no
//     wake, is "clean": its dequeue is answered "empty" without running
//     the script if another queue is not clean (asynq goes on to that
//     one), and otherwise held until a wake or until the oldest clean
//     queue's MaxWait is up;
//   - every other queue's dequeue runs at once.
//
// An idle worker so runs its dequeue scripts once per MaxWait, a busy one
// about one a job, and a job enqueued with a wake is taken within a
// pub/sub message's time. A task that reaches a queue without a wake (a
// retry or a scheduled task made pending by asynq itself, a wake lost
// with the subscription) waits at most MaxWait: no queue stays clean
// longer, whatever the other queues hold.

// WakeChannel is the channel on which producers name the asynq queue they
// enqueued a task in.
func (s *Store) WakeChannel() string { return s.key("wake") }

// Wake publishes asynq queues on WakeChannel, in one round trip: idle
// workers try them now.
func (s *Store) Wake(ctx context.Context, queues ...string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, q := range queues {
			p.Publish(ctx, s.WakeChannel(), q)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: wake: %w", err)
	}
	return nil
}

// SubscribeWake subscribes to WakeChannel and returns once Redis has
// confirmed it.
func (s *Store) SubscribeWake(ctx context.Context) (*redis.PubSub, error) {
	return s.subscribe(ctx, s.WakeChannel())
}

// DequeueGate applies the wakes to asynq's dequeues (see above). Its zero
// value is not usable: NewDequeueGate.
type DequeueGate struct {
	maxWait time.Duration

	mu sync.Mutex
	// changed is closed, and replaced, at every wake.
	changed chan struct{}
	// queues is every queue (its pending list's key) dequeued so far;
	// clean holds when each clean one was found empty; wakes counts each
	// one's wakes.
	queues map[string]bool
	clean  map[string]time.Time
	wakes  map[string]uint64
	closed bool
	// rdb is the client the gate is attached to (Attach).
	rdb redis.UniversalClient
	// onHold, if set, is called as a dequeue starts to wait (tests).
	onHold func()
}

// Attach adds g's Hook to rdb, the Redis client an asynq server uses, and
// lets g send each dequeue that runs in one pipeline with the length of
// its queue's pending list read right after it: a dequeue that took the
// queue's last task leaves the queue clean, where it took another dequeue,
// an empty script a job, to find it so.
func (g *DequeueGate) Attach(rdb redis.UniversalClient) {
	g.rdb = rdb
	rdb.AddHook(commandHook(g.process))
}

// NewDequeueGate returns a gate that keeps a queue clean at most maxWait
// (default 100 ms).
func NewDequeueGate(maxWait time.Duration) *DequeueGate {
	if maxWait <= 0 {
		maxWait = 100 * time.Millisecond
	}
	return &DequeueGate{maxWait: maxWait, changed: make(chan struct{}),
		queues: map[string]bool{}, clean: map[string]time.Time{}, wakes: map[string]uint64{}}
}

// Wake says a task was enqueued in asynq queue q; "" stands for every
// queue (a message that names none, a subscription confirmed again after
// a reconnect, when wakes may have been missed).
func (g *DequeueGate) Wake(q string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q == "" {
		clear(g.clean)
		for k := range g.wakes {
			g.wakes[k]++
		}
	} else if k := pendingKey(q); g.queues[k] {
		// Only queues this worker dequeues: a name from Redis adds no
		// entry (one never dequeued is not clean anyway).
		delete(g.clean, k)
		g.wakes[k]++
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// Close answers every dequeue "empty" at once, now and from now on: a
// worker that shuts down takes no new task, and its asynq server, no
// longer held, sees that it must stop.
func (g *DequeueGate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.Wake("")
}

// Listen applies every message on ps, and every subscription Redis
// confirms again, to g until ctx ends; it then closes ps.
func (g *DequeueGate) Listen(ctx context.Context, ps *redis.PubSub) {
	defer func() { _ = ps.Close() }()
	msgs := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			q := ""
			if msg, ok := m.(*redis.Message); ok {
				q = msg.Payload
			}
			g.Wake(q)
		}
	}
}

// enter decides queue's dequeue: run reports whether its script runs (else
// it is answered empty), and wakes is the queue's wake count it runs at.
func (g *DequeueGate) enter(ctx context.Context, queue string) (run bool, wakes uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queues[queue] = true
	for {
		now := time.Now()
		if g.closed {
			return false, 0 // shutting down: no new task
		}
		if !g.isClean(queue, now) {
			return true, g.wakes[queue]
		}
		oldest := now
		for q := range g.queues {
			if !g.isClean(q, now) {
				return false, 0 // asynq goes on to q
			}
			if g.clean[q].Before(oldest) {
				oldest = g.clean[q]
			}
		}
		changed := g.changed
		g.mu.Unlock()
		if g.onHold != nil {
			g.onHold()
		}
		t := time.NewTimer(oldest.Add(g.maxWait).Sub(now))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		g.mu.Lock()
		if ctx.Err() != nil {
			return true, g.wakes[queue]
		}
	}
}

func (g *DequeueGate) isClean(queue string, now time.Time) bool {
	at, ok := g.clean[queue]
	return ok && now.Sub(at) < g.maxWait
}

// ran records what queue's dequeue, run at wake count wakes, found: a
// task (drained: the last one), nothing, or an error. After an error the
// queue counts as clean (tried again within maxWait, or at a wake), so a
// Redis that fails is not retried in a tight loop; NOSCRIPT is the
// exception (go-redis sends the script itself at once).
func (g *DequeueGate) ran(queue string, wakes uint64, err error, drained bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case errors.Is(err, redis.ErrNoScript), redis.HasErrorPrefix(err, "NOSCRIPT"), g.wakes[queue] != wakes,
		err == nil && !drained:
		delete(g.clean, queue) // the script itself next, a wake during the script, or more tasks
	default:
		g.clean[queue] = time.Now()
	}
}

// process applies g to asynq's dequeue script on the client it is
// attached to; every other command passes untouched.
func (g *DequeueGate) process(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		queue, ok := dequeueQueue(cmd.Args())
		if !ok {
			return next(ctx, cmd)
		}
		run, wakes := g.enter(ctx, queue)
		if !run {
			cmd.SetErr(redis.Nil)
			return redis.Nil
		}
		// The pending list's length right after the script, in its
		// round trip (the same hash slot: one node on a Cluster).
		p := g.rdb.Pipeline()
		_ = p.Process(ctx, cmd)
		left := p.LLen(ctx, queue)
		_, _ = p.Exec(ctx) // the dequeue's own error is cmd's
		g.ran(queue, wakes, cmd.Err(), left.Err() == nil && left.Val() == 0)
		return cmd.Err()
	}
}

// commandHook is a redis.Hook on single commands: dials and pipelines
// pass untouched.
type commandHook func(next redis.ProcessHook) redis.ProcessHook

var _ redis.Hook = commandHook(nil)

func (commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return h(next) }

// pendingKey is asynq queue q's pending list (asynq's base.PendingKey).
func pendingKey(q string) string { return "asynq:{" + q + "}:pending" }

// dequeueQueue recognizes asynq's dequeue script by its keys (a queue's
// pending list, paused flag, active list and lease set, in that order;
// asynq v0.26 rdb.Dequeue) and returns the pending list's key.
func dequeueQueue(args []any) (string, bool) {
	keys, ok := scriptKeys(args, 4)
	if !ok {
		return "", false
	}
	base, ok := strings.CutSuffix(keys[0], ":pending")
	if !ok {
		return "", false
	}
	for i, suffix := range []string{":paused", ":active", ":lease"} {
		if keys[1+i] != base+suffix {
			return "", false
		}
	}
	return keys[0], true
}

// scriptKeys returns the keys of a command that runs a script (EVAL or
// EVALSHA) with n keys.
func scriptKeys(args []any, n int) ([]string, bool) {
	if len(args) < 3+n {
		return nil, false
	}
	name, _ := args[0].(string)
	if !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return nil, false
	}
	if k, ok := args[2].(int); !ok || k != n {
		return nil, false
	}
	keys := make([]string, n)
	for i := range keys {
		var ok bool
		if keys[i], ok = args[3+i].(string); !ok {
			return nil, false
		}
	}
	return keys, true
}

// A producer's wake goes out with the task: WithWake marks an enqueue's
// context, and the hook WakeHook returns, on the Redis client the asynq
// client uses, sends asynq's enqueue script and the PUBLISH of its queue
// on WakeChannel in one pipeline. Redis runs them in order, so the wake
// comes after the task is pending, with no round trip of its own between:
// a publish sent after the enqueue's reply reached the producer came a
// round trip and a goroutine's hand-off later, all on a lone job's path.

type wakeMarkKey struct{}

// WakeMark reports whether a wake went out with an enqueue (WithWake).
type WakeMark struct{ sent atomic.Bool }

// Sent reports whether the hook sent the wake: when it did not (a client
// without the hook, asynq's script not recognized), the producer wakes the
// workers itself.
func (m *WakeMark) Sent() bool { return m != nil && m.sent.Load() }

// WithWake marks ctx: an enqueue made with it wakes the workers in the
// same round trip, where the client has WakeHook.
func WithWake(ctx context.Context) (context.Context, *WakeMark) {
	m := &WakeMark{}
	return context.WithValue(ctx, wakeMarkKey{}, m), m
}

// WakeHook returns the hook that sends a marked enqueue with its wake (see
// WithWake). Add it to a client of its own for asynq (redis.Client's
// WithTimeout shares the pool): the pipeline runs on the Store's client.
func (s *Store) WakeHook() redis.Hook { return commandHook(s.wakeWithEnqueue) }

func (s *Store) wakeWithEnqueue(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		m, _ := ctx.Value(wakeMarkKey{}).(*WakeMark)
		if m == nil {
			return next(ctx, cmd)
		}
		q, ok := enqueueQueue(cmd.Args())
		if !ok {
			return next(ctx, cmd)
		}
		p := s.rdb.Pipeline()
		_ = p.Process(ctx, cmd)
		p.Publish(ctx, s.WakeChannel(), q)
		_, _ = p.Exec(ctx) // the enqueue's own error is cmd's; a lost wake costs a poll
		if cmd.Err() == nil {
			m.sent.Store(true)
		}
		return cmd.Err()
	}
}

// enqueueQueue recognizes asynq's enqueue script by its keys (a task's
// key, then its queue's pending list; asynq v0.26 rdb.Enqueue) and returns
// the queue's name.
func enqueueQueue(args []any) (string, bool) {
	keys, ok := scriptKeys(args, 2)
	if !ok {
		return "", false
	}
	base, ok := strings.CutSuffix(keys[1], ":pending")
	if !ok || !strings.HasPrefix(keys[0], base+":t:") {
		return "", false
	}
	q, ok := strings.CutPrefix(base, "asynq:{")
	if q, ok2 := strings.CutSuffix(q, "}"); ok && ok2 {
		return q, true
	}
	return "", false
}
