package jobs_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

func TestJudgedJobValidation(t *testing.T) {
	t.Parallel()
	p := langs.Policy(jobs.Policy{MaxTests: 3, MaxTestBytes: 100})
	base := func() jobs.Job {
		return jobs.Job{Lang: "python", Code: "print(input())", Tests: []jobs.TestCase{{Stdin: "1\n", ExpectedStdout: "1\n"}}}
	}
	ok := base()
	require.NoError(t, p.Validate(&ok))
	for _, tt := range []struct {
		name, field string
		mod         func(*jobs.Job)
	}{
		{"TooManyCases", "tests", func(j *jobs.Job) { j.Tests = make([]jobs.TestCase, 4) }},
		{"TooManyBytes", "tests", func(j *jobs.Job) { j.Tests[0].ExpectedStdout = strings.Repeat("x", 100) }},
		{"BothInputs", "tests[0]", func(j *jobs.Job) { j.Tests[0].StdinKey = "in/1.txt" }},
		{"BadKey", "tests[0].stdin_key", func(j *jobs.Job) { j.Tests[0].Stdin, j.Tests[0].StdinKey = "", "../x" }},
		{"StdinBesideTests", "stdin", func(j *jobs.Job) { j.Stdin = "x" }},
		{"JudgeWithoutTests", "judge", func(j *jobs.Job) { j.Tests, j.Judge = nil, &jobs.JudgeSpec{} }},
		{"UnknownCompare", "judge.compare", func(j *jobs.Job) { j.Judge = &jobs.JudgeSpec{Compare: "fuzzy"} }},
		{"NegativeTolerance", "judge.abs_tol", func(j *jobs.Job) { j.Judge = &jobs.JudgeSpec{Compare: jobs.CompareFloat, AbsTol: -1} }},
		{"CheckerLang", "judge.checker.lang", func(j *jobs.Job) { j.Judge = &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "cobol", Code: "x"}} }},
		{"CheckerCode", "judge.checker.code", func(j *jobs.Job) { j.Judge = &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "python", Code: " "}} }},
		{"CPUOverCap", "limits.cpu_ms", func(j *jobs.Job) { j.Limits.CPUMS = 60_001 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := base()
			tt.mod(&j)
			var ve *jobs.ValidationError
			require.ErrorAs(t, p.Validate(&j), &ve)
			require.Equal(t, tt.field, ve.Field, ve.Error())
		})
	}
}

func TestJudgedJobLimits(t *testing.T) {
	t.Parallel()
	p := langs.Policy(jobs.Policy{})
	// A judged job's wall backstop is twice its CPU limit plus a second,
	// unless it sets one; a plain job keeps the default timeout.
	j := jobs.Job{Lang: "py", Code: "x", Tests: []jobs.TestCase{{}}, Limits: jobs.Limits{CPUMS: 1500},
		Judge: &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "c++", Code: "int main(){}"}}}
	p.Normalize(&j)
	require.Equal(t, int64(4000), j.Limits.TimeoutMS)
	require.Equal(t, "cpp", j.Judge.Checker.Lang, "the checker's language is canonical")
	j = jobs.Job{Lang: "py", Code: "x", Tests: []jobs.TestCase{{}}, Limits: jobs.Limits{TimeoutMS: 500}}
	p.Normalize(&j)
	require.Equal(t, int64(500), j.Limits.TimeoutMS)
	require.Equal(t, int64(2000), j.Limits.CPUMS)
	j = jobs.Job{Lang: "py", Code: "x"}
	p.Normalize(&j)
	require.Equal(t, int64(10_000), j.Limits.TimeoutMS)

	var s *jobs.JudgeSpec
	require.True(t, s.StopsOnFailure())
	require.Equal(t, jobs.CompareLines, s.Mode())
	no := false
	require.False(t, (&jobs.JudgeSpec{StopOnFirstFailure: &no}).StopsOnFailure())
	for v, st := range map[jobs.Verdict]jobs.Status{jobs.VerdictAccepted: jobs.StatusSucceeded, jobs.VerdictTimeLimit: jobs.StatusTimeout,
		jobs.VerdictMemoryLimit: jobs.StatusOOM, jobs.VerdictOutputLimit: jobs.StatusOutputLimit, jobs.VerdictWrongAnswer: jobs.StatusFailed,
		jobs.VerdictCheckerError: jobs.StatusFailed, jobs.VerdictCompileError: jobs.StatusCompileError} {
		require.Equal(t, st, v.Status(), v)
	}
}
