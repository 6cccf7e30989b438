package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/measure"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// BenchmarkQueue measures, in one run, trivial print(1) jobs at concurrency
// 4 through the pool alone (in this process) and end to end: enqueued into
// Redis, run by a worker process, awaited through the result store. It
// prints both and the share of throughput the queue costs. Run with
// -benchtime 1x (make bench); SANDQ_BENCH_JOBS sets the jobs per phase.
func BenchmarkQueue(b *testing.B) {
	n := 400
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(b)
	metricsAddr := freeAddr(b)
	e.startWorker("--concurrency", "4", "--max-per-pool", "4", "--min-idle", "4", "--metrics-addr", metricsAddr)

	rt, err := sandbox.NewDocker(sandbox.DockerConfig{})
	require.NoError(b, err)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, MinIdle: 4, MaxTotal: 4, ReconcileInterval: -1})
	require.NoError(b, err)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pool.Close(ctx)
	}()
	spec, poolJob := measure.Print1(pool)
	queueJob := func() error {
		ctx := context.Background()
		info, err := e.client.Enqueue(ctx, jobs.Job{Lang: "python", Code: "print(1)"})
		if err != nil {
			return err
		}
		r, err := e.client.Wait(ctx, info.ID)
		if err == nil && (r.Status != jobs.StatusSucceeded || r.Stdout != "1\n") {
			err = fmt.Errorf("queued job ended %s: %q %s", r.Status, r.Stdout, r.Reason)
		}
		return err
	}
	pool.Warm(spec)
	_, err = measure.Run("warmup", 20, 4, poolJob)
	require.NoError(b, err)
	_, err = measure.Run("warmup", 20, 4, queueJob)
	require.NoError(b, err)

	counts0, sums0, err := phaseStats(metricsAddr)
	require.NoError(b, err)
	b.ResetTimer()
	var poolP, queueP measure.Phase
	for range b.N {
		poolP, err = measure.Run("pool only", n, 4, poolJob)
		require.NoError(b, err)
		queueP, err = measure.Run("enqueue+worker+wait", n, 4, queueJob)
		require.NoError(b, err)
	}
	b.StopTimer()
	measure.Table(os.Stdout, "print(1) through Redis", poolP, queueP)
	cost := 1 - queueP.Rate()/poolP.Rate()
	fmt.Printf("queue/pool throughput %.2f: the queue costs %.0f%% (target <= 20%%)\n", queueP.Rate()/poolP.Rate(), cost*100)
	b.ReportMetric(queueP.Rate(), "queue_c4_jobs/s")
	b.ReportMetric(queueP.Rate()/poolP.Rate(), "queue/pool_c4")

	// Where the queued jobs' time went, from the worker's
	// sandq_job_phase_seconds over the measured jobs.
	counts1, sums1, err := phaseStats(metricsAddr)
	require.NoError(b, err)
	fmt.Printf("\nper-job time breakdown (worker /metrics, %d queued jobs at c=4; mean per job)\n", n)
	for _, phase := range []string{"queue_wait", "start", "install", "plan", "acquire", "agent", "run", "upload", "store_result", "scrub"} {
		c := counts1[phase] - counts0[phase]
		if c == 0 {
			continue
		}
		mean := (sums1[phase] - sums0[phase]) / float64(c) * 1000
		note := ""
		switch phase {
		case "run":
			note = "(within agent)"
		case "scrub":
			note = "(after the result, off the job's path)"
		}
		fmt.Printf("  %-12s %6d  %8.2f ms %s\n", phase, c, mean, note)
	}
	fmt.Printf("  %-12s %6s  %8.2f ms (p50 of the whole, enqueue to result read)\n", "end to end", "", float64(queueP.Pct(0.5).Microseconds())/1000)
}
