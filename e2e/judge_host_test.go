package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/judge"
)

// An unsandboxed host judge, the baseline of the judge tests and of `make
// bench-judge`: each program compiled once on the host (C++ with the
// image's g++ flags), then run once per case as a subprocess with the
// case's stdin, timed by its CPU time like sandq's judge, compared with
// the same rules (package judge). Python is Debian's /usr/bin/python3, the
// same build as the image's.

// hostProgram is one program to judge on the host.
type hostProgram struct {
	lang  string // "python" or "cpp"
	code  string
	tests []jobs.TestCase
	spec  *jobs.JudgeSpec
	cpu   time.Duration
}

// hostJudge judges p in dir (a fresh directory) and returns its verdict.
func hostJudge(dir string, p hostProgram) (jobs.Verdict, error) {
	var argv []string
	switch p.lang {
	case "python":
		if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(p.code), 0o644); err != nil {
			return "", err
		}
		argv = []string{"/usr/bin/python3", "main.py"}
	case "cpp":
		if err := os.WriteFile(filepath.Join(dir, "main.cpp"), []byte(p.code), 0o644); err != nil {
			return "", err
		}
		cc := exec.Command("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp", "-lm")
		cc.Dir = dir
		if out, err := cc.CombinedOutput(); err != nil {
			return jobs.VerdictCompileError, fmt.Errorf("g++: %v: %s", err, out)
		}
		argv = []string{filepath.Join(dir, "main")}
	default:
		return "", fmt.Errorf("host judge: no %s", p.lang)
	}
	limits := judge.Limits{CPU: p.cpu, Wall: 2*p.cpu + time.Second}
	var cases []jobs.CaseResult
	for _, tc := range p.tests {
		ctx, cancel := context.WithTimeout(context.Background(), limits.Wall)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader([]byte(tc.Stdin))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		r := judge.Run{Started: true, Wall: time.Since(start), Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), TimedOut: timedOut}
		if st := cmd.ProcessState; st != nil {
			r.CPU = st.UserTime() + st.SystemTime()
			r.ExitCode = st.ExitCode()
		} else if err != nil {
			r.Started, r.Error = false, err.Error()
		}
		c := judge.Case(p.spec, tc, r, limits)
		cases = append(cases, c)
		if c.Verdict != jobs.VerdictAccepted {
			break
		}
	}
	v, _ := judge.Summarize(cases)
	return v, nil
}

// hostJudgeAll judges programs on the host, parallel at a time, and
// returns their verdicts in order.
func hostJudgeAll(t testing.TB, programs []hostProgram, parallel int) []jobs.Verdict {
	out := make([]jobs.Verdict, len(programs))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, p := range programs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			v, err := hostJudge(t.TempDir(), p)
			if err != nil && v == "" {
				t.Errorf("host judge: %v", err)
			}
			out[i] = v
		})
	}
	wg.Wait()
	return out
}

// codeContests loads the shared CodeContests sample's first n problems
// (all when n is 0) with their Python reference solutions.
func codeContests(t testing.TB, n int) []eval.StdioProblem {
	t.Helper()
	ps, err := eval.LoadStdioProblems(eval.FormatCodeContests, filepath.Join(dataDir(t), "codecontests", "codecontests_300.jsonl.gz"))
	require.NoError(t, err)
	list := ps.List
	if n > 0 && n < len(list) {
		list = list[:n]
	}
	return list
}
