package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

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
	b := newClientBundle(t)
	ps, err := b.client.Store().SubscribeWake(ctx)
	require.NoError(t, err)
	defer ps.Close()

	c, err := New(Config{Redis: b.rdb, Prefix: b.ns.Prefix, QueuePrefix: b.ns.Prefix, ResultTTL: time.Hour})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, jobs.Job{ID: "b1", Lang: "python", Code: "x", Queue: jobs.QueueBatch})
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
