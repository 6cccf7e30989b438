package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/jobs"
)

// These tests run batch and eval in-process against the real Redis, with
// fakeWorker standing in for the worker fleet: a real asynq server on the
// test's queues whose handler stores a final Result without running
// anything, so the batch logic (chunks, waiting, resume, dedupe) is tested
// without containers. e2e/batch_test.go runs the real thing.

func (b *testBundle) startFakeWorker(t *testing.T) *jobstest.FakeWorker {
	t.Helper()
	return b.ns.StartFakeWorker(t)
}

// readResults decodes every line of a batch's --out.
func readResults(t *testing.T, path string) []jobs.Result {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []jobs.Result
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r jobs.Result
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		out = append(out, r)
	}
	require.NoError(t, sc.Err())
	return out
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestBatchRunsEveryLineOnceAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startFakeWorker(t)
	dir := t.TempDir()

	var in strings.Builder
	for i := range 120 {
		fmt.Fprintf(&in, `{"lang": "python", "code": "print(%d)", "tags": {"i": "%d"}}`+"\n", i, i)
	}
	// Identical lines are distinct jobs; an explicit ID is kept; a line
	// that names its queue keeps it; a failing job is a result like any.
	in.WriteString(`{"lang": "python", "code": "print('same')"}` + "\n\n")
	in.WriteString(`{"lang": "python", "code": "print('same')"}` + "\n")
	in.WriteString(`{"id": "mine", "lang": "python", "code": "print('mine')", "queue": "critical"}` + "\n")
	in.WriteString(`{"lang": "python", "code": "raise SystemExit(1) # FAIL"}` + "\n")
	input := writeFile(t, dir, "jobs.jsonl", in.String())
	out := filepath.Join(dir, "results.jsonl")

	res := b.cli(t, "", "batch", "--in", input, "--out", out, "--chunk", "7", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "124 jobs; 0 already had results")
	require.Contains(t, res.stderr, "124 of 124 results: 123 succeeded, 1 failed")

	results := readResults(t, out)
	require.Len(t, results, 124)
	ids := map[string]jobs.Result{}
	for _, r := range results {
		require.NotContains(t, ids, r.ID, "result written twice")
		ids[r.ID] = r
		require.True(t, r.Status.Final())
	}
	require.Equal(t, jobs.QueueCritical, ids["mine"].Queue)
	runs := w.RunCounts()
	require.Len(t, runs, 124)
	for id, n := range runs {
		require.Equal(t, 1, n, id)
	}
	var tagged int
	for _, r := range results {
		if r.Tags["i"] != "" {
			tagged++
			require.Equal(t, "print("+r.Tags["i"]+")", r.Stdout)
			require.Equal(t, jobs.QueueBatch, r.Queue)
		}
	}
	require.Equal(t, 120, tagged)

	// The same command again: nothing to do, nothing run or written.
	res = b.cli(t, "", "batch", "--in", input, "--out", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "124 already had results in "+out+"; this run wrote 0")
	require.Len(t, readResults(t, out), 124)

	// A crash mid-write leaves half a line; a rerun drops it and takes
	// the job's result from Redis without running it again. Lines lost
	// altogether (here the last 20) are fetched the same way.
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.SplitAfter(strings.TrimSuffix(string(raw), "\n"), "\n")
	kept := strings.Join(lines[:100], "") + lines[100][:len(lines[100])/2]
	require.NoError(t, os.WriteFile(out, []byte(kept), 0o644))
	res = b.cli(t, "", "batch", "--in", input, "--out", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "dropped a truncated last line")
	require.Contains(t, res.stderr, "100 already had results in "+out+"; this run wrote 24 (24 found final in Redis, not run again)")
	again := readResults(t, out)
	require.Len(t, again, 124)
	seen := map[string]bool{}
	for _, r := range again {
		require.False(t, seen[r.ID], "result %s written twice", r.ID)
		seen[r.ID] = true
	}
	require.Equal(t, runs, w.RunCounts(), "a rerun ran nothing")
}

func TestBatchAwaitsJobsEnqueuedBeforeAnInterruption(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	var in strings.Builder
	for i := range 30 {
		fmt.Fprintf(&in, `{"lang": "python", "code": "print(%d)"}`+"\n", i)
	}
	input := writeFile(t, dir, "jobs.jsonl", in.String())
	out := filepath.Join(dir, "results.jsonl")

	// A first run with no worker enqueues everything and is interrupted
	// while waiting.
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &app{stdin: strings.NewReader("")}
	var stderr strings.Builder
	a.stdout, a.stderr, a.getenv = &strings.Builder{}, &stderr, func(string) string { return "" }
	done := make(chan int)
	go func() {
		done <- a.run(ctx, []string{"--redis", b.addr, "--prefix", b.prefix, "--queue-prefix", b.prefix,
			"batch", "--in", input, "--out", out, "--progress", "none"})
	}()
	require.Eventually(t, func() bool { return len(b.keys(t)) >= 30 }, 10*time.Second, 10*time.Millisecond)
	cancel(&interruptedError{sig: os.Interrupt})
	require.Equal(t, 130, <-done, stderr.String())
	require.Contains(t, stderr.String(), "Run the same command again to resume")

	// The rerun enqueues nothing new (Existing), and awaits them all.
	w := b.startFakeWorker(t)
	res := b.cli(t, "", "batch", "--in", input, "--out", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Len(t, readResults(t, out), 30)
	for id, n := range w.RunCounts() {
		require.Equal(t, 1, n, id)
	}
}

func TestBatchInvalidLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startFakeWorker(t)
	dir := t.TempDir()
	input := writeFile(t, dir, "jobs.jsonl", strings.Join([]string{
		`{"lang": "python", "code": "print(1)"}`,
		`{"lang": "python", "code": "print(2)", "colour": "red"}`,
		`{"lang": "cobol", "code": "x"}`,
		`not json`,
		`{"id": "a", "lang": "python", "code": "print(3)"}`,
		`{"id": "a", "lang": "python", "code": "print(4)"}`,
		`{"lang": "python", "code": "print(5)"} {"lang": "python", "code": "print(6)"}`,
	}, "\n"))
	out := filepath.Join(dir, "results.jsonl")

	res := b.cli(t, "", "batch", "--in", input, "--out", out)
	require.Equal(t, exitRejected, res.code)
	for _, want := range []string{
		input + `:2: invalid: json: unknown field "colour"`,
		input + `:3: invalid: jobs: invalid job: lang:`,
		input + `:4: invalid: not a JSON object`,
		input + `:6: invalid: id "a" is also the id of line 5`,
		input + `:7: invalid: unexpected data after the JSON object`,
		"5 invalid lines; nothing was enqueued",
	} {
		require.Contains(t, res.stderr, want)
	}
	require.Empty(t, b.keys(t), "nothing reached Redis")
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist, "--out is not created for a refused batch")

	res = b.cli(t, "", "batch", "--in", input, "--out", out, "--skip-invalid", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, input+`:3: skipped invalid:`)
	require.Contains(t, res.stderr, "2 jobs (5 invalid lines skipped)")
	require.Len(t, readResults(t, out), 2)
	require.Len(t, w.RunCounts(), 2)
}

func TestBatchRefusesAForeignOutFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	input := writeFile(t, dir, "jobs.jsonl", `{"lang": "python", "code": "print(1)"}`+"\n")
	out := writeFile(t, dir, "notes.txt", "dear diary\nnothing happened\n")
	res := b.cli(t, "", "batch", "--in", input, "--out", out)
	require.Equal(t, exitCLI, res.code)
	require.Contains(t, res.stderr, "line 1: not a result")
	b2, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "dear diary\nnothing happened\n", string(b2), "left untouched")
	require.Empty(t, b.keys(t))
}

func TestPlainProgressLines(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	tick := make(chan time.Time)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := now
	var mu sync.Mutex
	p := newPlainProgress(&syncWriter{w: &out, mu: &mu}, "batch", 10, tick, func() time.Time { return clock })
	for range 4 {
		p.add(jobs.Result{Status: jobs.StatusSucceeded})
	}
	p.add(jobs.Result{Status: jobs.StatusTimeout})
	clock = now.Add(2 * time.Second)
	tick <- clock
	tick <- clock // nothing new: no line
	p.finish()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "batch: 5/10 done (50.0%), 1 failed, 2.5 jobs/s, elapsed 2s, ETA 2s\n", out.String())
}

type syncWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func TestBarProgressShowsCountFailuresRateAndETA(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	var mu sync.Mutex
	p := newBarProgress(&syncWriter{w: &out, mu: &mu}, "batch", 3)
	p.add(jobs.Result{Status: jobs.StatusSucceeded})
	p.add(jobs.Result{Status: jobs.StatusFailed})
	p.add(jobs.Result{Status: jobs.StatusSucceeded})
	p.finish()
	mu.Lock()
	defer mu.Unlock()
	got := out.String()
	t.Logf("%q", got)
	require.Contains(t, got, "batch (1 failed)")
	require.Contains(t, got, "(3/3")
	require.Contains(t, got, "jobs/s")
}
