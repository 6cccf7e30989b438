package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// One tenant's backlog does not delay another tenant's first job by more
// than one job's run time per slot: tenant A queues ten 1-second jobs on a
// worker of 2 slots; tenant B's one job runs as soon as one of A's first
// jobs ends, not after A's backlog (which waits in A's lane, not in
// asynq's queue ahead of B).
func TestFairShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "2", "--min-idle", "2")
	ctx := context.Background()
	require.Eventually(t, func() bool {
		n, err := e.client.Store().FleetSlots(ctx)
		return err == nil && n == 2
	}, 30*time.Second, 50*time.Millisecond, "the worker registers its 2 slots")

	var backlog []string
	for i := range 10 {
		j := py("import time; time.sleep(1)")
		if i < 2 {
			// a0 and a1 hold the fleet's two slots until well after the
			// test has read A's usage and enqueued B's job, however late.
			j = py("import time; time.sleep(20)")
			j.Limits.TimeoutMS = 60_000
		}
		j.ID, j.Tenant = fmt.Sprintf("a%d", i), "A"
		backlog = append(backlog, e.enqueue(j))
	}
	e.waitRunning("a0", time.Minute)
	e.waitRunning("a1", time.Minute)
	u, err := e.client.Store().Usage(ctx, "A")
	require.NoError(t, err)
	require.Equal(t, int64(10), u.Jobs)
	require.Equal(t, int64(2), u.Running, "A alone: its share is the whole fleet, 2; the other 8 are held")

	b := py("print('b')")
	b.ID, b.Tenant = "b", "B"
	e.enqueue(b)
	rb := e.wait("b", time.Minute)
	require.Equal(t, jobs.StatusSucceeded, rb.Status, rb.Reason)
	before := 0
	for _, id := range backlog {
		r, err := e.client.Get(ctx, id)
		require.NoError(t, err)
		if !r.StartedAt.IsZero() && r.StartedAt.Before(rb.StartedAt) {
			before++
		}
	}
	require.LessOrEqual(t, before, 3, "B's job started after %d of A's: it waited behind A's backlog", before)
	for _, id := range backlog {
		r := e.wait(id, 2*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, "every held job of A runs in the end: %s", r.Reason)
	}
	u, err = e.client.Store().Usage(ctx, "A")
	require.NoError(t, err)
	require.Equal(t, int64(0), u.Jobs, "the ledger is empty once every job has ended")
}
