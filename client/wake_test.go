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
// process that enqueues and exits), and a task that already existed wakes
// nobody.
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

	// Enqueued again: the task exists, no wake; then a new one in
	// another queue, whose wake is the next message.
	_, err = b.client.Enqueue(ctx, jobs.Job{ID: "b1", Lang: "python", Code: "x", Queue: jobs.QueueBatch})
	require.NoError(t, err)
	_, err = b.client.Enqueue(ctx, jobs.Job{ID: "c1", Lang: "python", Code: "x", Queue: jobs.QueueCritical})
	require.NoError(t, err)
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err = ps.ReceiveMessage(mctx)
	require.NoError(t, err)
	require.Equal(t, store.AsynqQueue(b.ns.Prefix, jobs.QueueCritical), msg.Payload)
}
