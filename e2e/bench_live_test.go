package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// BenchmarkLiveOutput measures live output in one run: the throughput of a
// batch of print(1) jobs with live output off and on (alternating, twice
// each, through EnqueueBatch and one WaitEach; the cost is the drop in
// jobs/s), and the first-byte latency from the program's write to a
// reader of Client.Stream (the program writes its clock; the reader,
// subscribed before the job is enqueued, compares with its own: same host).
// SANDQ_BENCH_JOBS sets the batch size (default 400).
func BenchmarkLiveOutput(b *testing.B) {
	n := 400
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(b)
	e.startWorker("--concurrency", "2", "--min-idle", "2", "--max-per-pool", "2")
	batch := func(n int, stream bool) float64 {
		js := make([]jobs.Job, n)
		for i := range js {
			js[i] = py("print(1)")
			js[i].Stream = stream
		}
		start := time.Now()
		infos, err := e.client.EnqueueBatch(context.Background(), js)
		require.NoError(b, err)
		ids := make(chan string, n)
		for _, in := range infos {
			require.NoError(b, in.Err)
			ids <- in.ID
		}
		close(ids)
		require.NoError(b, e.client.WaitEach(context.Background(), ids, func(r jobs.Result) error {
			if r.Status != jobs.StatusSucceeded || r.Stdout != "1\n" {
				return fmt.Errorf("job %s: %s %q", r.ID, r.Status, r.Stdout)
			}
			return nil
		}))
		return float64(n) / time.Since(start).Seconds()
	}
	batch(n/4, false) // warm up
	b.ResetTimer()
	var off, on []float64
	for range 2 {
		off = append(off, batch(n, false))
		on = append(on, batch(n, true))
	}

	// First byte: the program prints its clock at once, then sleeps, so
	// the chunk goes by the 50 ms flush, not the end of the step.
	var lat []time.Duration
	for i := range 40 {
		job := py("import time\nprint(time.time_ns(), flush=True)\ntime.sleep(0.3)")
		job.Stream = true
		job.ID = fmt.Sprintf("first-byte-%d-%s", i, jobs.NewID()[:6])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		got := make(chan time.Duration, 1)
		go func() {
			for en, err := range e.client.Stream(ctx, job.ID, "") {
				if err != nil || en.End() {
					break
				}
				if ns, err := strconv.ParseInt(strings.TrimSpace(string(en.Data)), 10, 64); err == nil {
					got <- time.Since(time.Unix(0, ns))
					return
				}
			}
			got <- -1
		}()
		time.Sleep(20 * time.Millisecond) // the reader is blocked on the stream
		e.enqueue(job)
		d := <-got
		cancel()
		require.Positive(b, d, "first byte of job %d", i)
		lat = append(lat, d)
	}
	b.StopTimer()
	slices.Sort(lat)
	mean := func(v []float64) float64 { return (v[0] + v[1]) / 2 }
	fmt.Printf("live output, print(1) batch of %d at concurrency 2: off %.1f jobs/s (%.1f, %.1f), on %.1f jobs/s (%.1f, %.1f): on/off %.3f, cost %.1f%% (target <= 5%%)\n",
		n, mean(off), off[0], off[1], mean(on), on[0], on[1], mean(on)/mean(off), (1-mean(on)/mean(off))*100)
	fmt.Printf("live output first byte, program write to reader: p50 %s, p99 %s (target p50 <= 60 ms), %d jobs\n",
		lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)*99/100].Round(100*time.Microsecond), len(lat))
	b.ReportMetric(mean(on)/mean(off), "live_on/off")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "first_byte_p50_ms")
}
