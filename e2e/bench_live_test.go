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

	"github.com/sandq/sandq/internal/measure"
	"github.com/sandq/sandq/jobs"
)

// BenchmarkLiveOutput measures live output in one run: the throughput of
// batches of print(1) jobs with live output off and on (taking turns, eight
// batches of a quarter each way, through EnqueueBatch and one WaitEach; the
// cost is the drop in jobs/s), and the first-byte latency from the
// program's write to a reader of Client.Stream (the program writes its clock; the reader,
// subscribed before the job is enqueued, compares with its own: same host).
// SANDQ_BENCH_JOBS sets the batch size (default 400).
func BenchmarkLiveOutput(b *testing.B) {
	n := 400
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(b)
	e.startWorker("--concurrency", "2", "--min-idle", "2", "--max-per-pool", "2")
	// batch runs n jobs through EnqueueBatch and one WaitEach and returns
	// how long they took.
	batch := func(n int, stream bool) time.Duration {
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
		return time.Since(start)
	}
	batch(n/4, false) // warm up
	b.ResetTimer()
	// Off and on take turns of n/4 jobs, eight each, in ABBA order: the
	// cost sought is a few hundredths, and batches of the same work moved
	// by a tenth or more from one to the next (107–158 jobs/s over ten
	// batches of 400 with live output off, 2026-11-29; with two turns of
	// n each, the off batches of one run 128.6 and 96.4). Each side's rate
	// is its jobs over the sum of its turns' times.
	const turns = 8
	var took [2]time.Duration // off, on
	var rates [2][]float64
	cpu := []map[string]time.Duration{{}, {}} // by command, over each side's turns
	m := max(n/4, 1)
	for r := range turns {
		for i := range 2 {
			k := (r + i) % 2 // 0 off, 1 on: off first in even rounds, on first in odd ones
			var d time.Duration
			measure.Tally(cpu[k], func() { d = batch(m, k == 1) })
			took[k] += d
			rates[k] = append(rates[k], float64(m)/d.Seconds())
		}
	}
	off, on := float64(turns*m)/took[0].Seconds(), float64(turns*m)/took[1].Seconds()

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
	fmt.Printf("live output, print(1) at concurrency 2, %d turns of %d jobs each way (ABBA): off %.1f jobs/s, on %.1f jobs/s: on/off %.3f, cost %.1f%% (target <= 5%%)\n",
		turns, m, off, on, on/off, (1-on/off)*100)
	fmt.Printf("  turns' rates, off: %s\n  turns' rates, on:  %s\n", rateList(rates[0]), rateList(rates[1]))
	measure.CPUTable(os.Stdout, "CPU a job, c=2", []measure.Phase{{Name: "live output off", Lat: make([]time.Duration, turns*m)},
		{Name: "live output on", Lat: make([]time.Duration, turns*m)}}, cpu)
	fmt.Printf("live output first byte, program write to reader: p50 %s, p99 %s (target p50 <= 60 ms), %d jobs\n",
		lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)*99/100].Round(100*time.Microsecond), len(lat))
	b.ReportMetric(on/off, "live_on/off")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "first_byte_p50_ms")
}

// rateList is rates as "12.3 45.6 …".
func rateList(rates []float64) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strings.Join(s, " ")
}
