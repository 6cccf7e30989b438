package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// newWakeBundle is a client bundle, a subscription to its wake channel and
// a second Client on the same Redis, which the test closes.
func newWakeBundle(t *testing.T) (*clientBundle, *redis.PubSub, *Client) {
	t.Helper()
	b := newClientBundle(t)
	ps, err := b.client.Store().SubscribeWake(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { ps.Close() })
	c, err := New(Config{Redis: b.rdb, Prefix: b.ns.Prefix, QueuePrefix: b.ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	return b, ps, c
}

// TestEnqueueWakesTheWorkers: an enqueue publishes its asynq queue on the
// wake channel, also when the Client is closed right after (a producer
// process that enqueues and exits), in the enqueue's own round trip where
// the Client's Redis is a single one (the wake goes out pipelined with
// asynq's script). A task that already existed adds nothing; its enqueue
// may still wake (the pipelined wake is sent before asynq's answer is
// known), which costs an idle worker one empty dequeue.
func TestEnqueueWakesTheWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, ps, c := newWakeBundle(t)
	_, err := c.Enqueue(ctx, jobs.Job{ID: "b1", Lang: "python", Code: "x", Queue: jobs.QueueBatch})
	require.NoError(t, err)
	require.NoError(t, c.Close())

	msg, err := ps.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, store.AsynqQueue(b.ns.Prefix, jobs.QueueBatch), msg.Payload)

	require.True(t, c.wakeInline, "a single Redis: the wake goes with the enqueue")

	// Enqueued again: the task exists (at most its own queue's wake); then
	// a new one in another queue, whose wake follows.
	info, err := b.client.Enqueue(ctx, jobs.Job{ID: "b1", Lang: "python", Code: "x", Queue: jobs.QueueBatch})
	require.NoError(t, err)
	require.True(t, info.Existing)
	_, err = b.client.Enqueue(ctx, jobs.Job{ID: "c1", Lang: "python", Code: "x", Queue: jobs.QueueCritical})
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err = ps.ReceiveMessage(mctx)
	require.NoError(t, err)
	if msg.Payload == store.AsynqQueue(b.ns.Prefix, jobs.QueueBatch) {
		msg, err = ps.ReceiveMessage(mctx)
		require.NoError(t, err)
	}
	require.Equal(t, store.AsynqQueue(b.ns.Prefix, jobs.QueueCritical), msg.Payload)
}

// TestWakeInlineOnlyWhenAlone: a lone enqueue sends its wake with the task;
// one made while another enqueue is under way leaves it to the waker, which
// coalesces the wakes of many enqueues (a flood does not publish one wake
// per task for every worker to receive). Either way the wake arrives.
func TestWakeInlineOnlyWhenAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, ps, c := newWakeBundle(t)
	defer c.Close()
	var published atomic.Int64
	c.wakes = newWaker(func(ctx context.Context, queues ...string) error {
		published.Add(1)
		return c.store.Wake(ctx, queues...)
	})
	want := store.AsynqQueue(b.ns.Prefix, jobs.QueueDefault)
	receive := func() {
		t.Helper()
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(mctx)
		require.NoError(t, err)
		require.Equal(t, want, msg.Payload)
	}

	_, err := c.Enqueue(ctx, jobs.Job{ID: "alone", Lang: "python", Code: "x"})
	require.NoError(t, err)
	receive()
	require.Zero(t, published.Load(), "alone: the wake went with the task, not through the waker")

	c.enqueuing.Add(1) // another enqueue under way
	_, err = c.Enqueue(ctx, jobs.Job{ID: "crowded", Lang: "python", Code: "x"})
	c.enqueuing.Add(-1)
	require.NoError(t, err)
	receive()
	require.EqualValues(t, 1, published.Load(), "beside another: the waker published it")
}
