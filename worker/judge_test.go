package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// A fake contestant for the judge's decisions: the handler's requests to
// the sandbox are answered by program, which gets each case's stdin (and
// how many times that case ran) and returns its step. The real path
// (agent, containers) is in e2e's judge tests.
type fakeJudge struct {
	mu       sync.Mutex
	requests []*agent.RunRequest
	runs     map[string]int
}

func (f *fakeJudge) sandbox(program func(stdin string, n int) agent.StepResult, checker func(input, output, answer string) agent.StepResult) func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
	return func(_ context.Context, spec sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requests = append(f.requests, req)
		if f.runs == nil {
			f.runs = map[string]int{}
		}
		var out agent.RunResult
		for _, st := range req.Steps {
			switch st.Name {
			case "case":
				f.runs[string(st.Stdin)]++
				out.Steps = append(out.Steps, program(string(st.Stdin), f.runs[string(st.Stdin)]))
			case "check":
				// The checker's arguments name its case's files.
				files := map[string]string{}
				for _, fl := range req.Files {
					files[fl.Path] = string(fl.Data)
				}
				args := st.Argv[len(st.Argv)-3:]
				out.Steps = append(out.Steps, checker(files[args[0]], files[args[1]], files[args[2]]))
			default: // compile, prepare
				out.Steps = append(out.Steps, step(st.Name))
			}
		}
		return out, nil
	}
}

func prints(s string) func(*agent.StepResult) {
	return func(st *agent.StepResult) { st.Stdout = agent.Output{Head: []byte(s), Total: int64(len(s))} }
}

func cpu(d time.Duration) func(*agent.StepResult) {
	return func(st *agent.StepResult) { st.CPUNs = int64(d) }
}

func TestJudged(t *testing.T) {
	t.Parallel()
	tests := []jobs.TestCase{{Stdin: "1 2\n", ExpectedStdout: "3\n"}, {Stdin: "2 2\n", ExpectedStdout: "4\n"}, {Stdin: "5 5\n", ExpectedStdout: "10\n"}}
	// A program that adds, but says 5 for 2+2, and runs out of CPU on 5 5.
	adder := func(stdin string, n int) agent.StepResult {
		switch stdin {
		case "2 2\n":
			return step("case", prints("5\n"))
		case "5 5\n":
			return step("case", prints("10\n"), cpu(3500*time.Millisecond))
		}
		return step("case", prints("3\n"))
	}
	run := func(t *testing.T, j jobs.Job, program func(string, int) agent.StepResult, checker func(string, string, string) agent.StepResult) (jobs.Result, *fakeJudge) {
		t.Helper()
		b := setupHandler(t, nil)
		f := &fakeJudge{}
		b.sb.run = f.sandbox(program, checker)
		b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:img", nil }
		tk, a := task(t, j)
		require.NoError(t, b.h.process(context.Background(), a, tk))
		return b.result(t, a.id), f
	}
	verdicts := func(r jobs.Result) []jobs.Verdict {
		var out []jobs.Verdict
		for _, c := range r.Cases {
			out = append(out, c.Verdict)
		}
		return out
	}

	// The sandbox lost to what a case did (the container's OOM kill, here
	// while case 2 ran) ends the job as oom with what a judged Result
	// always has: case 1 accepted, case 2 memory_limit, case 3 skipped.
	t.Run("SandboxLostInACase", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		f := &fakeJudge{}
		fake := f.sandbox(adder, nil)
		b.sb.run = func(ctx context.Context, spec sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error) {
			if len(req.Steps) == 1 && req.Steps[0].Name == "case" && string(req.Steps[0].Stdin) == "2 2\n" {
				return agent.RunResult{}, sandbox.ErrSandboxOOM
			}
			return fake(ctx, spec, req)
		}
		b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:img", nil }
		tk, a := task(t, jobs.Job{Lang: "cpp", Code: "x", Tests: tests, Judge: &jobs.JudgeSpec{StopOnFirstFailure: new(false)}})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusOOM, r.Status, r.Reason)
		require.Equal(t, jobs.VerdictMemoryLimit, r.Verdict)
		require.Equal(t, []jobs.Verdict{jobs.VerdictAccepted, jobs.VerdictMemoryLimit, jobs.VerdictSkipped}, verdicts(r))
		require.Contains(t, r.Cases[1].Detail, "OOM killer")
		require.NotNil(t, r.Score)
		require.Equal(t, 1.0/3, *r.Score)
	})

	t.Run("StopsAtTheFirstFailure", func(t *testing.T) {
		t.Parallel()
		r, f := run(t, jobs.Job{Lang: "cpp", Code: "x", Tests: tests}, adder, nil)
		require.Equal(t, jobs.VerdictWrongAnswer, r.Verdict)
		require.Equal(t, jobs.StatusFailed, r.Status)
		require.Equal(t, []jobs.Verdict{jobs.VerdictAccepted, jobs.VerdictWrongAnswer, jobs.VerdictSkipped}, verdicts(r))
		require.Equal(t, `case 2: wrong_answer: line 1: expected "4", got "5"`, r.Reason)
		require.Equal(t, 1.0/3, *r.Score)
		require.Equal(t, "5\n", r.Cases[1].Stdout)
		require.Equal(t, "4\n", r.Cases[1].Expected)
		require.NotNil(t, r.Compile, "the compile step is on record")
		// The compile request, then one request per case run: a fresh
		// process each, its stdin, the work dir frozen.
		require.Len(t, f.requests, 3)
		require.Equal(t, "compile", f.requests[0].Steps[len(f.requests[0].Steps)-1].Name)
		require.NotEmpty(t, f.requests[0].Files, "the program's files come with the compile")
		for _, req := range f.requests[1:] {
			require.Len(t, req.Steps, 1)
			st := req.Steps[0]
			require.True(t, st.FreshCase)
			require.False(t, st.Prestart, "C++ has no fork server")
			require.Empty(t, req.Files)
			require.Equal(t, 5*time.Second, st.Timeout, "the wall backstop: 2 x cpu_ms + 1 s")
		}
		require.Equal(t, "sha256:img", r.Provenance.Image)
		require.Equal(t, int64(2000), r.Provenance.Limits.CPUMS)
	})

	t.Run("KeepsGoingAndRerunsASuspectTimeLimit", func(t *testing.T) {
		t.Parallel()
		no := false
		// 2.5 s of CPU against 2 s the first time (suspect: within the
		// margin), 1.5 s the second: accepted after a rerun.
		slowOnce := func(stdin string, n int) agent.StepResult {
			if stdin == "5 5\n" && n == 1 {
				return step("case", prints("10\n"), cpu(2500*time.Millisecond))
			}
			if stdin == "5 5\n" {
				return step("case", prints("10\n"), cpu(1500*time.Millisecond))
			}
			return adder(stdin, n)
		}
		r, f := run(t, jobs.Job{Lang: "python", Code: "x", Tests: tests, Judge: &jobs.JudgeSpec{StopOnFirstFailure: &no}}, slowOnce, nil)
		require.Equal(t, []jobs.Verdict{jobs.VerdictAccepted, jobs.VerdictWrongAnswer, jobs.VerdictAccepted}, verdicts(r))
		require.True(t, r.Cases[2].Rerun)
		require.Equal(t, 2, f.runs["5 5\n"])
		require.True(t, f.requests[1].Steps[0].Prestart, "a Python case asks for its fork server")
		require.Equal(t, 50*time.Second, f.requests[len(f.requests)-1].Steps[0].Timeout, "a rerun's wall backstop is ten times wider")
		require.Equal(t, 2.0/3, *r.Score)

		// Far past the limit (3.5 s of 2): time_limit, not rerun.
		r, f = run(t, jobs.Job{Lang: "python", Code: "x", Tests: tests, Judge: &jobs.JudgeSpec{StopOnFirstFailure: &no}}, adder, nil)
		require.Equal(t, jobs.VerdictTimeLimit, r.Cases[2].Verdict)
		require.False(t, r.Cases[2].Rerun)
		require.Equal(t, 1, f.runs["5 5\n"])
		require.Equal(t, jobs.VerdictWrongAnswer, r.Verdict, "the first failed case's verdict")
	})

	t.Run("VerdictClasses", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			step   agent.StepResult
			want   jobs.Verdict
			status jobs.Status
		}{
			{step("case", func(s *agent.StepResult) { s.OOMKilled, s.Signal, s.ExitCode = true, 9, -1 }), jobs.VerdictMemoryLimit, jobs.StatusOOM},
			{step("case", func(s *agent.StepResult) { s.Signal, s.ExitCode = 11, -1 }), jobs.VerdictRuntimeError, jobs.StatusFailed},
			{step("case", func(s *agent.StepResult) { s.Stdout.Truncated = true }), jobs.VerdictOutputLimit, jobs.StatusOutputLimit},
			{step("case", func(s *agent.StepResult) { s.TimedOut, s.CPUNs = true, int64(3*time.Second) }), jobs.VerdictTimeLimit, jobs.StatusTimeout},
		} {
			r, _ := run(t, jobs.Job{Lang: "python", Code: "x", Tests: tests[:1]}, func(string, int) agent.StepResult { return tt.step }, nil)
			require.Equal(t, tt.want, r.Verdict)
			require.Equal(t, tt.status, r.Status)
		}
	})

	t.Run("CompileError", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		b.sb.run = func(_ context.Context, _ sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error) {
			require.Equal(t, "compile", req.Steps[len(req.Steps)-1].Name, "no case runs")
			return agent.RunResult{Steps: []agent.StepResult{step("compile", func(s *agent.StepResult) { s.ExitCode = 1 })}}, nil
		}
		b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:img", nil }
		tk, a := task(t, jobs.Job{Lang: "cpp", Code: "x", Tests: tests})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.VerdictCompileError, r.Verdict)
		require.Equal(t, jobs.StatusCompileError, r.Status)
		require.Empty(t, r.Cases)
		require.Equal(t, 0.0, *r.Score)
	})

	t.Run("Checker", func(t *testing.T) {
		t.Parallel()
		// Any permutation of the expected tokens is right; the checker
		// says so. The third case's checker crashes: checker_error, not
		// the contestant's wrong answer.
		perm := []jobs.TestCase{{Stdin: "a", ExpectedStdout: "1 2"}, {Stdin: "b", ExpectedStdout: "1 2"}, {Stdin: "c", ExpectedStdout: "1 2"}}
		program := func(stdin string, _ int) agent.StepResult { return step("case", prints("2 1")) }
		checker := func(input, output, answer string) agent.StepResult {
			if input == "c" {
				return step("check", func(s *agent.StepResult) { s.Signal, s.ExitCode = 6, -1 })
			}
			require.Equal(t, "2 1", output)
			require.Equal(t, "1 2", answer)
			return step("check", prints("ok, a permutation"))
		}
		no := false
		r, f := run(t, jobs.Job{Lang: "python", Code: "x", Tests: perm,
			Judge: &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "python", Code: "import sys"}, StopOnFirstFailure: &no}}, program, checker)
		require.Equal(t, []jobs.Verdict{jobs.VerdictAccepted, jobs.VerdictAccepted, jobs.VerdictCheckerError}, verdicts(r))
		require.Equal(t, jobs.VerdictCheckerError, r.Verdict)
		require.Equal(t, "ok, a permutation", r.Cases[0].Checker)
		var checks int
		for _, req := range f.requests {
			for _, st := range req.Steps {
				if st.Name == "check" {
					checks++
					require.Regexp(t, `^check/\d+/input check/\d+/output check/\d+/answer$`, strings.Join(st.Argv[len(st.Argv)-3:], " "))
					require.False(t, st.FreshCase)
				}
			}
		}
		require.Equal(t, 3, checks)

		// Without a checker the same output is a wrong answer.
		r, _ = run(t, jobs.Job{Lang: "python", Code: "x", Tests: perm}, program, nil)
		require.Equal(t, jobs.VerdictWrongAnswer, r.Verdict)
		require.True(t, strings.HasPrefix(r.Reason, "case 1: wrong_answer"), r.Reason)
	})
}

// TestCheckerCrashed: a checker whose runtime reports an uncaught error
// has crashed, unless the marker is in the contestant's output (which a
// checker may echo): a contestant cannot make its wrong answer a
// checker_error.
func TestCheckerCrashed(t *testing.T) {
	py, _ := langs.Lookup("python")
	trace := []byte("Traceback (most recent call last):\n  File \"main.py\"\nIndexError: x\n")
	require.True(t, crashed(py.CrashMarkers, trace, []byte("2 3\n")))
	require.False(t, crashed(py.CrashMarkers, []byte("2 + 3 != 6\n"), []byte("2 3\n")))
	require.False(t, crashed(py.CrashMarkers, trace, []byte("Traceback (most recent call last):\n")))
}
