package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
	sandqworker "github.com/sandq/sandq/worker"
)

// processRSS is a process's resident set size in bytes (VmRSS).
func processRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// redisUsedMemory is Redis's used_memory in bytes.
func (e *env) redisUsedMemory() int64 {
	info, err := e.rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkBoundedBatch runs a batch of jobs with random limits and tenants
// (SANDQ_BENCH_BOUNDED_JOBS, default 5,000; one in 50 prints 4 MiB of
// binary stdout) on one worker at concurrency 2, sampling the worker's
// RSS, its containers on the engine and Redis's used memory throughout. It
// prints the peaks against the bounds the README states and the baselines
// measured in the same run (an idle worker, Redis before the batch), and
// fails if containers pass --max-containers or a stored result passes
// --max-result-bytes. Run with -benchtime 1x (make bench).
func BenchmarkBoundedBatch(b *testing.B) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_BOUNDED_JOBS")); err == nil && v > 0 {
		n = v
	}
	const maxContainers = 6 // the default for --concurrency 2: 2 × 2 + 2
	e := newEnv(b)
	w := e.startWorker("--concurrency", "2", "--max-containers", strconv.Itoa(maxContainers), "--warm", "python",
		"--idle-timeout", "30s")
	// Warm up, then take the baselines.
	for range 4 {
		r := e.wait(e.enqueue(py("print(1)")), time.Minute)
		require.Equal(b, jobs.StatusSucceeded, r.Status)
	}
	time.Sleep(time.Second)
	baseRSS, baseRedis := processRSS(w.cmd.Process.Pid), e.redisUsedMemory()

	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs ...int64) int64 { return vs[rng.IntN(len(vs))] }
	batch := make([]jobs.Job, n)
	keys := map[string]bool{}
	for i := range batch {
		j := py(fmt.Sprintf("print(%d)", i))
		if i%50 == 0 {
			j = py("import sys\nsys.stdout.buffer.write(bytes(range(256)) * 16384)")
			j.Limits.OutputBytes = 4 << 20
		}
		j.Queue = jobs.QueueBatch
		j.Tenant = fmt.Sprintf("tenant-%02d", rng.IntN(20))
		j.Limits.MemoryMB = pick(64, 128, 256, 512)
		j.Limits.Pids = pick(32, 64, 128)
		j.Limits.CPUs = []float64{0.5, 1, 2}[rng.IntN(3)]
		j.Limits.TimeoutMS = pick(2000, 5000, 10_000)
		batch[i] = j
		keys[fmt.Sprint(j.Tenant, j.Limits.MemoryMB, j.Limits.Pids, j.Limits.CPUs, j.Limits.TimeoutMS)] = true
	}

	var (
		mu                          sync.Mutex
		peakRSS, peakRedis, samples int64
		peakContainers              int
	)
	ctx, stop := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			rss, mem := processRSS(w.cmd.Process.Pid), e.redisUsedMemory()
			cs, err := e.rt.List(ctx, map[string]string{sandbox.LabelOwner: w.owner})
			mu.Lock()
			peakRSS, peakRedis, samples = max(peakRSS, rss), max(peakRedis, mem), samples+1
			if err == nil {
				peakContainers = max(peakContainers, len(cs))
			}
			mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	}()

	b.ResetTimer()
	start := time.Now()
	infos, err := e.client.EnqueueBatch(context.Background(), batch)
	require.NoError(b, err)
	ids := make(chan string, len(infos))
	for _, in := range infos {
		require.NoError(b, in.Err)
		ids <- in.ID
	}
	close(ids)
	statuses := map[jobs.Status]int{}
	var largest int64
	wctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	require.NoError(b, e.client.WaitEach(wctx, ids, func(r jobs.Result) error {
		statuses[r.Status]++
		size, err := e.rdb.StrLen(context.Background(), e.client.Store().ResultKey(r.ID)).Result()
		largest = max(largest, size)
		return err
	}))
	took := time.Since(start)
	b.StopTimer()
	stop()
	<-sampled

	fmt.Printf("bounded batch: %d jobs, %d distinct limit/tenant keys, %s (%.1f jobs/s), statuses %v\n",
		n, len(keys), took.Round(time.Second), float64(n)/took.Seconds(), statuses)
	fmt.Printf("  containers: peak %d, bound --max-containers %d (%d samples)\n", peakContainers, maxContainers, samples)
	fmt.Printf("  worker RSS: peak %.1f MiB, idle baseline %.1f MiB, ratio %.2f\n",
		float64(peakRSS)/(1<<20), float64(baseRSS)/(1<<20), float64(peakRSS)/float64(max(baseRSS, 1)))
	fmt.Printf("  Redis used_memory: peak %.1f MiB, baseline %.1f MiB, growth %.1f KiB per job (results stay until --result-ttl)\n",
		float64(peakRedis)/(1<<20), float64(baseRedis)/(1<<20), float64(peakRedis-baseRedis)/1024/float64(n))
	fmt.Printf("  largest stored result: %d bytes, bound --max-result-bytes %d\n", largest, sandqworker.DefaultMaxResultBytes)
	require.Equal(b, n, statuses[jobs.StatusSucceeded], "every job succeeds")
	require.LessOrEqual(b, peakContainers, maxContainers)
	require.LessOrEqual(b, largest, int64(sandqworker.DefaultMaxResultBytes))
	b.ReportMetric(float64(peakContainers), "containers_peak")
	b.ReportMetric(float64(peakRSS)/float64(max(baseRSS, 1)), "rss_peak/idle")
	b.ReportMetric(float64(peakRedis-baseRedis)/float64(n), "redis_B/job")
}
