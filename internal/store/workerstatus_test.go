package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
)

// A worker's status is read back as written, lives as long as its TTL,
// and goes with its owner; the latency histogram counts each job once,
// in the bucket of its bound.
func TestWorkerStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "wstatus")
	st := store.WorkerStatus{At: time.Now().UTC().Truncate(time.Millisecond), Containers: 3,
		Pools:   []store.PoolStatus{{Pool: "sandq/python:latest", Idle: 1, Busy: 2, Warm: true}},
		Latency: []store.LatencyStatus{store.Latency("python", []int64{4, 5, 6, 7, 300, 20000})}}
	require.NoError(t, n.Store.PublishWorkerStatus(ctx, "w1", st, time.Minute))
	require.NoError(t, n.Store.PublishWorkerStatus(ctx, "w2", store.WorkerStatus{Containers: 1}, 500*time.Millisecond))
	got, err := n.Store.WorkerStatuses(ctx, []string{"w1", "w2", "never"})
	require.NoError(t, err)
	require.Equal(t, st, got["w1"])
	require.Equal(t, 1, got["w2"].Containers)
	require.NotContains(t, got, "never")

	l := got["w1"].Latency[0]
	require.Equal(t, 6, l.Jobs)
	require.Equal(t, []int{2, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, l.Buckets, "≤5: 4 and 5; ≤10: 6 and 7; ≤500: 300; above 10 s: 20000")
	require.Equal(t, int64(6), l.P50MS)
	require.Equal(t, int64(300), l.P99MS)

	require.Eventually(t, func() bool {
		got, err := n.Store.WorkerStatuses(ctx, []string{"w2"})
		return err == nil && len(got) == 0
	}, 5*time.Second, 50*time.Millisecond, "the status expires with its TTL")

	require.NoError(t, n.Store.Heartbeat(ctx, "w1", time.Minute))
	require.NoError(t, n.Store.OwnerGone(ctx, "w1"))
	got, err = n.Store.WorkerStatuses(ctx, []string{"w1"})
	require.NoError(t, err)
	require.Empty(t, got, "a worker gone takes its status with it")
}
