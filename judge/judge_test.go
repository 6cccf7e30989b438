package judge_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/judge"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode      jobs.Compare
		got, want string
		ok        bool
		detail    string
	}{
		{jobs.CompareExact, "1 2\n", "1 2\n", true, ""},
		{jobs.CompareExact, "1 2", "1 2\n", false, "differs at byte 3"},
		{jobs.CompareLines, "1 2  \r\n3\n\n\n", "1 2\n3", true, ""},
		{jobs.CompareLines, "1  2\n", "1 2\n", false, `line 1: expected "1 2", got "1  2"`},
		{jobs.CompareLines, "1\n2\n", "1\n", false, "2 lines, expected 1"},
		{jobs.CompareLines, "", "", true, ""},
		{jobs.CompareTokens, " 1\n\n2\t3 ", "1 2 3", true, ""},
		{jobs.CompareTokens, "1 2", "1 2 3", false, "2 tokens, expected 3"},
		{jobs.CompareTokens, "1 2.0", "1 2", false, `token 2: expected "2", got "2.0"`},
		{jobs.CompareFloat, "0.3333334 YES", "0.333333 YES", true, ""},
		{jobs.CompareFloat, "0.34 YES", "0.333333 YES", false, `token 1: expected "0.333333", got "0.34"`},
		{jobs.CompareFloat, "1000001", "1000000", true, ""}, // relative 1e-6
		{jobs.CompareFloat, "NaN", "NaN", true, ""},         // equal tokens
		{jobs.CompareFloat, "NaN", "1", false, `token 1: expected "1", got "NaN"`},
		{jobs.CompareFloat, "yes", "YES", false, `token 1: expected "YES", got "yes"`},
	} {
		ok, detail := judge.Compare(tt.mode, []byte(tt.got), []byte(tt.want), 1e-6, 1e-6)
		require.Equal(t, tt.ok, ok, "%s %q vs %q", tt.mode, tt.got, tt.want)
		require.Equal(t, tt.detail, detail, "%s %q vs %q", tt.mode, tt.got, tt.want)
	}
}

func TestCaseVerdicts(t *testing.T) {
	t.Parallel()
	l := judge.Limits{CPU: time.Second, Wall: 3 * time.Second}
	tc := jobs.TestCase{Name: "n", ExpectedStdout: "3\n"}
	ok := judge.Run{Started: true, CPU: 10 * time.Millisecond, Wall: 20 * time.Millisecond, Stdout: []byte("3\n")}
	for _, tt := range []struct {
		name string
		mod  func(*judge.Run)
		want jobs.Verdict
	}{
		{"Accepted", func(*judge.Run) {}, jobs.VerdictAccepted},
		{"WrongAnswer", func(r *judge.Run) { r.Stdout = []byte("4\n") }, jobs.VerdictWrongAnswer},
		{"CPU", func(r *judge.Run) { r.CPU = 1100 * time.Millisecond }, jobs.VerdictTimeLimit},
		{"Backstop", func(r *judge.Run) { r.TimedOut, r.Signal, r.ExitCode = true, 9, -1 }, jobs.VerdictTimeLimit},
		{"Memory", func(r *judge.Run) { r.OOMKilled, r.Signal, r.ExitCode = true, 9, -1 }, jobs.VerdictMemoryLimit},
		{"Output", func(r *judge.Run) { r.Truncated = true }, jobs.VerdictOutputLimit},
		{"Signal", func(r *judge.Run) { r.Signal, r.ExitCode = 11, -1 }, jobs.VerdictRuntimeError},
		{"Exit", func(r *judge.Run) { r.ExitCode = 1 }, jobs.VerdictRuntimeError},
		{"NoStart", func(r *judge.Run) { r.Started, r.Error = false, "no such file" }, jobs.VerdictRuntimeError},
		// Memory first: an OOM-killed program that also used its CPU
		// time is memory_limit.
		{"MemoryBeforeTime", func(r *judge.Run) { r.OOMKilled, r.CPU = true, 2*time.Second }, jobs.VerdictMemoryLimit},
		{"RuntimeOutOfMemory", func(r *judge.Run) { r.OutOfMemory, r.ExitCode = true, 1 }, jobs.VerdictMemoryLimit},
	} {
		r := ok
		tt.mod(&r)
		c := judge.Case(nil, tc, r, l)
		require.Equal(t, tt.want, c.Verdict, "%s: %+v", tt.name, c)
		require.Equal(t, "n", c.Name)
	}
	wa := judge.Case(nil, tc, judge.Run{Started: true, Stdout: []byte("4\n")}, l)
	require.Equal(t, "4\n", wa.Stdout)
	require.Equal(t, "3\n", wa.Expected)
	require.Equal(t, `line 1: expected "3", got "4"`, wa.Detail)
	require.Equal(t, 0, *wa.ExitCode)
	seg := judge.Case(nil, tc, judge.Run{Started: true, Signal: 11, ExitCode: -1, Stderr: []byte("boom")}, l)
	require.Nil(t, seg.ExitCode)
	require.Equal(t, "SIGSEGV", seg.Signal)
	require.Equal(t, "boom", seg.Stderr)
}

func TestSuspect(t *testing.T) {
	t.Parallel()
	l := judge.Limits{CPU: time.Second, Wall: 3 * time.Second}
	require.True(t, judge.Suspect(judge.Run{Started: true, CPU: 1200 * time.Millisecond}, l), "just over the CPU limit")
	require.False(t, judge.Suspect(judge.Run{Started: true, CPU: 1600 * time.Millisecond}, l), "far over it")
	require.True(t, judge.Suspect(judge.Run{Started: true, CPU: 200 * time.Millisecond, TimedOut: true}, l), "starved: wall over, CPU under")
	require.False(t, judge.Suspect(judge.Run{Started: true, CPU: 200 * time.Millisecond}, l), "not a time limit")
	require.False(t, judge.Suspect(judge.Run{Started: true, CPU: 1200 * time.Millisecond, OOMKilled: true}, l))
}

func TestCheckerVerdict(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r    judge.Run
		want jobs.Verdict
	}{
		{judge.Run{Started: true}, jobs.VerdictAccepted},
		{judge.Run{Started: true, ExitCode: 1}, jobs.VerdictWrongAnswer},
		{judge.Run{Started: true, ExitCode: 2}, jobs.VerdictWrongAnswer},
		{judge.Run{Started: true, ExitCode: 3}, jobs.VerdictCheckerError},
		{judge.Run{Started: true, ExitCode: -1, Signal: 6}, jobs.VerdictCheckerError},
		{judge.Run{Started: true, TimedOut: true}, jobs.VerdictCheckerError},
		{judge.Run{}, jobs.VerdictCheckerError},
	} {
		v, _ := judge.CheckerVerdict(tt.r)
		require.Equal(t, tt.want, v, "%+v", tt.r)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	v, s := judge.Summarize([]jobs.CaseResult{{Verdict: jobs.VerdictAccepted}, {Verdict: jobs.VerdictTimeLimit},
		{Verdict: jobs.VerdictWrongAnswer}, {Verdict: jobs.VerdictAccepted}})
	require.Equal(t, jobs.VerdictTimeLimit, v, "the first failed case's")
	require.Equal(t, 0.5, s)
	v, s = judge.Summarize([]jobs.CaseResult{{Verdict: jobs.VerdictAccepted}, {Verdict: jobs.VerdictAccepted}})
	require.Equal(t, jobs.VerdictAccepted, v)
	require.Equal(t, 1.0, s)
	v, s = judge.Summarize([]jobs.CaseResult{{Verdict: jobs.VerdictRuntimeError}, {Verdict: jobs.VerdictSkipped}})
	require.Equal(t, jobs.VerdictRuntimeError, v)
	require.Equal(t, 0.0, s)
	require.Equal(t, "SIGSEGV", judge.SignalName(11))
	require.Equal(t, "signal 64", judge.SignalName(64))
}
