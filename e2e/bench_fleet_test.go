package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-units"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/measure"
	"github.com/sandq/sandq/jobs"
)

// rssMB is a process's resident set (VmRSS) in MiB.
func rssMB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// containerMB is the memory the engine charges each container (its
// cgroup's usage, as `docker stats` shows it), in MiB.
func containerMB(ids []string) ([]float64, error) {
	out, err := exec.Command("docker", append([]string{"stats", "--no-stream", "--format", "{{.MemUsage}}"}, ids...)...).Output()
	if err != nil {
		return nil, err
	}
	var mbs []float64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		used, _, _ := strings.Cut(line, " / ")
		b, err := units.RAMInBytes(strings.TrimSpace(used))
		if err != nil {
			return nil, fmt.Errorf("docker stats %q: %w", line, err)
		}
		mbs = append(mbs, float64(b)/(1<<20))
	}
	return mbs, nil
}

// BenchmarkFootprint: an idle worker's resident memory after 100 jobs, and
// each of its warm python containers' (the agent waiting for a job), against
// the targets (worker <= 30 MB, container <= 5 MB). A container is measured
// twice: while it holds the interpreter it started for its next job (within
// --prestart-hold of its last job), and once past the hold, idle.
func BenchmarkFootprint(b *testing.B) {
	const hold = 20 * time.Second
	e := newEnv(b)
	w := e.startWorker("--concurrency", "4", "--max-per-pool", "4", "--min-idle", "4", "--warm", "python",
		"--prestart-hold", hold.String())
	for range b.N {
		_, err := measure.Run("jobs", 100, 4, func() error {
			r := e.wait(e.enqueue(py("print(1)")), time.Minute)
			if r.Status != jobs.StatusSucceeded {
				return fmt.Errorf("%s: %s", r.Status, r.Reason)
			}
			return nil
		})
		require.NoError(b, err)
	}
	last := time.Now()
	b.StopTimer()
	// Scrubs done, the pool refilled, the interpreters for the next jobs
	// started, the worker and the agents idle (agent.IdleTrim), the hold
	// not over.
	time.Sleep(hold / 2)
	ready := warmContainersMB(b, e, w, true)
	time.Sleep(time.Until(last.Add(hold + 5*time.Second)))
	rss, err := rssMB(w.cmd.Process.Pid)
	require.NoError(b, err)
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid)); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "RssAnon") || strings.HasPrefix(line, "RssFile") {
				fmt.Println("footprint: worker " + strings.Join(strings.Fields(line), " "))
			}
		}
	}
	idle := warmContainersMB(b, e, w, false)
	mean := func(mbs []float64) (float64, float64) {
		var sum, peak float64
		for _, m := range mbs {
			sum += m
			peak = max(peak, m)
		}
		return sum / float64(len(mbs)), peak
	}
	readyMean, readyMax := mean(ready)
	idleMean, idleMax := mean(idle)
	fmt.Printf("footprint: worker RSS idle %.1f MB (target <= 30, ratio %.2f)\n", rss, rss/30)
	fmt.Printf("footprint: %d warm containers idle past the hold: mean %.2f MB, max %.2f MB (target <= 5, ratio %.2f)\n",
		len(idle), idleMean, idleMax, idleMean/5)
	fmt.Printf("footprint: %d warm containers holding the next job's interpreter: mean %.2f MB, max %.2f MB (ratio to 5: %.2f)\n",
		len(ready), readyMean, readyMax, readyMean/5)
	b.ReportMetric(rss, "worker_rss_mb")
	b.ReportMetric(idleMean, "container_mb")
	b.ReportMetric(readyMean, "container_ready_mb")
}

// warmContainersMB is the memory of each of w's running containers; with
// holding, of those running the fork server (python3 main.py) only.
func warmContainersMB(b *testing.B, e *env, w *worker, holding bool) []float64 {
	var ids []string
	for _, c := range e.containers(w.owner) {
		if c.State != "running" {
			continue
		}
		if holding {
			out, err := exec.Command("docker", "top", c.ID, "-o", "pid,args").Output()
			require.NoError(b, err)
			if !strings.Contains(string(out), "python3 main.py") {
				continue
			}
		}
		ids = append(ids, c.ID)
	}
	require.NotEmpty(b, ids)
	mbs, err := containerMB(ids)
	require.NoError(b, err)
	return mbs
}

// BenchmarkScaleOut: print(1) jobs through the queue with one worker at
// concurrency 4 against two workers at 2 each, on this machine and one
// Redis; the ratio says what a second process costs or buys.
func BenchmarkScaleOut(b *testing.B) {
	n := 400
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	job := func(e *env) func() error {
		return func() error {
			r := e.wait(e.enqueue(py("print(1)")), time.Minute)
			if r.Status != jobs.StatusSucceeded {
				return fmt.Errorf("%s: %s", r.Status, r.Reason)
			}
			return nil
		}
	}
	var one, two measure.Phase
	for range b.N {
		e1 := newEnv(b)
		w := e1.startWorker("--concurrency", "4", "--max-per-pool", "4", "--min-idle", "4", "--warm", "python")
		_, err := measure.Run("warmup", 20, 4, job(e1))
		require.NoError(b, err)
		one, err = measure.Run("1 worker × 4", n, 4, job(e1))
		require.NoError(b, err)
		w.signal(os.Interrupt)
		require.NoError(b, w.wait(time.Minute))

		e2 := newEnv(b)
		for range 2 {
			e2.startWorker("--concurrency", "2", "--max-per-pool", "2", "--min-idle", "2", "--warm", "python")
		}
		_, err = measure.Run("warmup", 20, 4, job(e2))
		require.NoError(b, err)
		two, err = measure.Run("2 workers × 2", n, 4, job(e2))
		require.NoError(b, err)
	}
	b.StopTimer()
	measure.Table(os.Stdout, "scale-out: print(1) through one Redis", one, two)
	fmt.Printf("two workers / one: throughput %.2f, p50 %.2f\n", two.Rate()/one.Rate(), float64(two.Pct(0.5))/float64(one.Pct(0.5)))
	b.ReportMetric(two.Rate()/one.Rate(), "two_workers/one")
}
