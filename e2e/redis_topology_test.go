package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/jobs"
)

// TestRedisCluster: the fleet on a local three-master Redis Cluster
// (--redis with three addresses): a batch across two workers ends with
// one succeeded result per job, each run once; a session keeps its state
// across two cells.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	const n = 300
	c := redistest.StartCluster(t, 3)
	e := newEnvWith(t, config.Redis{Addr: strings.Join(c.Addrs(), ",")})
	w1 := e.startWorker("--concurrency", "2")
	w2 := e.startWorker("--concurrency", "2")
	in := writeBatchInput(t, n)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	done, log := e.startBatch(t, in, out, 0, 0)
	require.NoError(t, <-done, log.String())
	checkBatchResults(t, out, n)
	runs := waitJobsDone(t, n, w1, w2)
	require.Len(t, runs, n)
	for id, count := range runs {
		require.Equal(t, 1, count, "job %s ran %d times", id, count)
	}
	t.Logf("jobs per worker: %d and %d", len(jobsDone(w1)), len(jobsDone(w2)))

	// Sessions too: their slot registry and records are sandq's keys, in
	// the prefix's slot.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := e.client.OpenSession(ctx, jobs.SessionSpec{Lang: "python"})
	require.NoError(t, err)
	_, err = sess.Exec(ctx, jobs.Cell{Code: "x = 41"})
	require.NoError(t, err)
	r, err := sess.Exec(ctx, jobs.Cell{Code: "x + 1"})
	require.NoError(t, err)
	require.Equal(t, "42", r.Results[0].Data["text/plain"])
	require.NoError(t, sess.Close(ctx))
}

// TestRedisSentinelFailover: the fleet on a Sentinel set (--redis lists
// the sentinels, --redis-master names the master). The master is killed
// mid-batch; the sentinels promote the replica, and the batch, run again
// if the failover stopped it (it resumes), ends with one succeeded result
// per job: none lost.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	const n = 600
	s := redistest.StartSentinel(t)
	e := newEnvWith(t, config.Redis{Addr: strings.Join(s.SentinelAddrs(), ","), MasterName: s.MasterName})
	e.startWorker("--concurrency", "2")
	e.startWorker("--concurrency", "2")
	in := writeBatchInput(t, n)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	done, log := e.startBatch(t, in, out, 0, 0)
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "done") && progressDone(log.String()) >= n/3 },
		5*time.Minute, 50*time.Millisecond, "a third of the batch before the failover")
	start := time.Now()
	s.Failover(t)
	t.Logf("failover to %s after %s", s.Replica.Addr, time.Since(start).Round(time.Millisecond))
	runs := 1
	for err := <-done; err != nil; err = <-done {
		require.Less(t, runs, 4, "the batch did not complete in 3 runs: %v\n%s", err, log)
		t.Logf("run %d ended with %v; resuming", runs, err)
		runs++
		done, log = e.startBatch(t, in, out, 0, 0)
	}
	checkBatchResults(t, out, n)
	t.Logf("%d jobs, 0 lost, in %d run(s) of the batch", n, runs)
}

// progressDone reads the last "batch: N/M done" of a progress log.
func progressDone(log string) int {
	m := regexp.MustCompile(`batch(?: \((\d+) done before\))?: (\d+)/\d+ done`).FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0
	}
	before, _ := strconv.Atoi(m[len(m)-1][1])
	done, _ := strconv.Atoi(m[len(m)-1][2])
	return before + done
}
