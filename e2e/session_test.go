package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandq/sandq/client"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

func openSession(t *testing.T, e *env, spec jobs.SessionSpec) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := e.client.OpenSession(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func execCell(t *testing.T, s *client.Session, code string, timeout ...time.Duration) jobs.CellResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cell := jobs.Cell{Code: code}
	if len(timeout) > 0 {
		cell.TimeoutMS = timeout[0].Milliseconds()
	}
	r, err := s.Exec(ctx, cell)
	require.NoError(t, err)
	return r
}

func text(r jobs.CellResult) string {
	if len(r.Results) == 0 {
		return ""
	}
	return r.Results[len(r.Results)-1].Data["text/plain"]
}

type cellOutcome struct {
	r   jobs.CellResult
	err error
}

// TestSessions drives sessions end to end on one worker: state in every
// language, rich results, timeouts, OOM, files, tenants' containers.
func TestSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1", "--max-sessions", "6")

	t.Run("StatePersists", func(t *testing.T) {
		for _, tc := range []struct {
			lang  string
			cells []string
			want  string // the third cell's text/plain result, or stdout for bash
		}{
			{"python", []string{"import math\nx = 40", "def f(y):\n    return y + 2", "f(x) * math.floor(1.5)"}, "42"},
			{"javascript", []string{"let x = 40", "function f(y) { return y + 2 }", "f(x)"}, "42"},
			{"r", []string{"x <- 40", "f <- function(y) y + 2", "f(x)"}, "[1] 42"},
			{"bash", []string{"cd /tmp && X=40", "f() { echo $(( $1 + 2 )); }", "f $X; pwd"}, "42\n/tmp\n"},
		} {
			t.Run(tc.lang, func(t *testing.T) {
				s := openSession(t, e, jobs.SessionSpec{Lang: tc.lang})
				var last jobs.CellResult
				for i, code := range tc.cells {
					last = execCell(t, s, code)
					require.Equal(t, jobs.CellOK, last.Status, "cell %d: %+v", i+1, last)
					require.Equal(t, i+1, last.ExecutionCount)
				}
				if tc.lang == "bash" {
					require.Equal(t, tc.want, last.Stdout)
				} else {
					require.Equal(t, tc.want, strings.TrimSpace(text(last)))
				}
				info, err := s.Info(context.Background())
				require.NoError(t, err)
				require.Equal(t, jobs.SessionReady, info.State)
				require.Equal(t, 3, info.ExecutionCount)
			})
		}
	})

	t.Run("PythonRichResults", func(t *testing.T) {
		// matplotlib, pandas and plotly imports on a loaded machine: each
		// cell may take more than the default 10 s.
		s := openSession(t, e, jobs.SessionSpec{Lang: "python", Limits: jobs.Limits{TimeoutMS: 60_000}})
		r := execCell(t, s, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
		require.Equal(t, jobs.CellOK, r.Status, "%+v", r)
		require.Len(t, r.Results, 1, "one figure")
		png, err := base64.StdEncoding.DecodeString(r.Results[0].Data["image/png"])
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "a PNG")
		r = execCell(t, s, "fig, ax = plt.subplots()\nax.bar([1], [2])\nNone") // left open: shown at the end
		require.Len(t, r.Results, 1, "the figure left open")
		require.Contains(t, r.Results[0].Data, "image/png")
		r = execCell(t, s, "import pandas as pd\npd.DataFrame({'a': [1, 2]})")
		require.Contains(t, r.Results[0].Data["text/html"], "<table")
		require.Contains(t, r.Results[0].Data["text/plain"], "a")
		// A plotly page is megabytes: it goes to the artifact store.
		r = execCell(t, s, "import plotly.express as px\npx.line(x=[1, 2], y=[3, 4])")
		require.Equal(t, jobs.CellOK, r.Status, "%+v", r.Error)
		require.Len(t, r.Artifacts, 1, "the HTML moved out")
		require.Equal(t, r.Artifacts[0].Name, r.Results[0].Artifact)
		require.Equal(t, "text/html", r.Artifacts[0].ContentType)
		require.Greater(t, r.Artifacts[0].Size, int64(256<<10))
		require.NotContains(t, r.Results[0].Data, "text/html")
		page, err := os.ReadFile(r.Results[0].URL) // the local store: a path
		require.NoError(t, err)
		require.Contains(t, string(page), "plotly")
		r = execCell(t, s, "print('out'); 1/0")
		require.Equal(t, jobs.CellError, r.Status)
		require.Equal(t, "out\n", r.Stdout)
		require.Equal(t, "ZeroDivisionError", r.Error.Name)
		require.NotEmpty(t, r.Error.Traceback)
		require.NotContains(t, strings.Join(r.Error.Traceback, ""), "sandq-session", "no driver frames")
	})

	t.Run("TimeoutInterruptsAndTheSessionLives", func(t *testing.T) {
		for _, tc := range []struct{ lang, hang, after, want string }{
			{"python", "x = 1\nwhile True:\n    pass", "x + 1", "2"},
			{"javascript", "var x = 1; while (true) {}", "x + 1", "2"},
			{"bash", "X=1; sleep 100", "echo $((X + 1))", "2"},
			// A foreground program that survives the first SIGINT: the
			// agent repeats it for bash (Driver.InterruptEvery).
			{"bash", "X=1; bash -c 'trap \"trap - INT\" INT; while :; do sleep 0.1; done'", "echo $((X + 1))", "2"},
		} {
			t.Run(tc.lang, func(t *testing.T) {
				s := openSession(t, e, jobs.SessionSpec{Lang: tc.lang})
				start := time.Now()
				r := execCell(t, s, tc.hang, time.Second)
				require.Equal(t, jobs.CellTimeout, r.Status, "%+v", r)
				require.Less(t, time.Since(start), 20*time.Second, "the hang (100 s or endless) was stopped")
				require.Equal(t, jobs.SessionReady, r.Session)
				r = execCell(t, s, tc.after)
				require.Equal(t, jobs.CellOK, r.Status, "%+v", r)
				got := strings.TrimSpace(text(r))
				if tc.lang == "bash" {
					got = strings.TrimSpace(r.Stdout)
				}
				require.Equal(t, tc.want, got)
			})
		}
	})

	t.Run("MemoryBombEndsTheSessionOOM", func(t *testing.T) {
		s := openSession(t, e, jobs.SessionSpec{Lang: "python", Limits: jobs.Limits{MemoryMB: 64}})
		r := execCell(t, s, "x = b'x' * (1 << 30)")
		require.Equal(t, jobs.CellSessionEnded, r.Status, "%+v", r)
		require.Equal(t, jobs.SessionOOM, r.Session)
		_, err := s.Exec(context.Background(), jobs.Cell{Code: "1"})
		require.ErrorIs(t, err, jobs.ErrSessionEnded)
	})

	t.Run("FilesByteExact", func(t *testing.T) {
		s := openSession(t, e, jobs.SessionSpec{Lang: "python", Files: []jobs.File{{Path: "in/seed.txt", ContentB64: []byte("seed")}}})
		ctx := context.Background()
		blob := make([]byte, 3<<20)
		for i := range blob {
			blob[i] = byte(i * 7)
		}
		require.NoError(t, s.Upload(ctx, "data/blob.bin", blob))
		r := execCell(t, s, "import hashlib\nd = open('data/blob.bin','rb').read()\nopen('data/out.txt','w').write(open('in/seed.txt').read() + str(len(d)))\nlen(d)")
		require.Equal(t, fmt.Sprint(len(blob)), text(r))
		got, err := s.Download(ctx, "data/blob.bin")
		require.NoError(t, err)
		require.True(t, bytes.Equal(blob, got), "byte-exact")
		got, err = s.Download(ctx, "data/out.txt")
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("seed%d", len(blob)), string(got))
		files, err := s.Files(ctx, "")
		require.NoError(t, err)
		var paths []string
		for _, f := range files {
			paths = append(paths, f.Path)
		}
		require.Subset(t, paths, []string{"data", "data/blob.bin", "data/out.txt", "in", "in/seed.txt"})
		for _, bad := range []string{"../etc/passwd", "/etc/passwd", "a/../../x"} {
			require.Error(t, s.Upload(ctx, bad, []byte("x")), bad)
			_, err := s.Download(ctx, bad)
			require.Error(t, err, bad)
		}
		// A link the program made to a file outside is not followed.
		execCell(t, s, "import os\nos.symlink('/etc/passwd', 'link')")
		_, err = s.Download(ctx, "link")
		require.Error(t, err, "a symbolic link is not followed")
	})

	t.Run("TenantsNeverShareContainers", func(t *testing.T) {
		a := openSession(t, e, jobs.SessionSpec{Lang: "python", Tenant: "acme"})
		b := openSession(t, e, jobs.SessionSpec{Lang: "python", Tenant: "umbrella"})
		execCell(t, a, "open('/tmp/mark', 'w').write('a')")
		rb := execCell(t, b, "import os\nos.path.exists('/tmp/mark')")
		require.Equal(t, "False", text(rb), "two containers: B sees nothing of A's")
		list, err := e.client.Sessions(context.Background(), "acme")
		require.NoError(t, err)
		for _, s := range list {
			require.Equal(t, "acme", s.Tenant)
		}
		require.NotEmpty(t, list)
	})
}

// TestSessionLimits: --max-sessions, idle TTL, one cell at a time.
func TestSessionLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1", "--max-sessions", "2")
	ctx := context.Background()
	// Neither has a short idle TTL: opening a session can take seconds on a
	// loaded machine, and one that expired meanwhile would free its slot.
	a := openSession(t, e, jobs.SessionSpec{Lang: "bash"})
	b := openSession(t, e, jobs.SessionSpec{Lang: "bash"})
	_, err := e.client.OpenSession(ctx, jobs.SessionSpec{Lang: "bash"})
	require.ErrorIs(t, err, jobs.ErrNoSessionSlots, "a third session on a worker of --max-sessions 2")
	require.Contains(t, err.Error(), "max-sessions")

	// One cell at a time.
	done := make(chan cellOutcome, 1)
	go func() {
		r, err := b.Exec(ctx, jobs.Cell{ID: "slow", Stream: true, Code: "echo running; sleep 5; echo slow"})
		done <- cellOutcome{r, err}
	}()
	waitStreamed(t, e, jobs.CellStreamID(b.ID(), "slow"), "running")
	_, err = b.Exec(ctx, jobs.Cell{Code: "echo second"})
	require.ErrorIs(t, err, jobs.ErrSessionBusy, "a second cell is refused while one runs")
	slow := <-done
	require.NoError(t, slow.err)
	require.Equal(t, "running\nslow\n", slow.r.Stdout)

	// Closing a frees its slot; c, opened in it, closes itself when idle,
	// and its slot is free again: d is the worker's second session with b.
	require.NoError(t, a.Close(ctx))
	c := openSession(t, e, jobs.SessionSpec{Lang: "bash", IdleTTLSeconds: 6})
	var info jobs.SessionInfo
	require.Eventually(t, func() bool {
		var err error
		info, err = c.Info(ctx)
		return err == nil && info.State == jobs.SessionExpired
	}, 30*time.Second, 100*time.Millisecond)
	require.Contains(t, info.Reason, "idle")
	d := openSession(t, e, jobs.SessionSpec{Lang: "bash"})
	require.Equal(t, "ok\n", execCell(t, d, "echo ok").Stdout)
}

// TestSessionWorkerKilled: a SIGKILLed worker's sessions answer
// session_lost within 15 s.
func TestSessionWorkerKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("--concurrency", "1", "--max-sessions", "2")
	s := openSession(t, e, jobs.SessionSpec{Lang: "python"})
	execCell(t, s, "x = 1")
	w.signal(syscall.SIGKILL)
	start := time.Now()
	_, err := s.Exec(context.Background(), jobs.Cell{Code: "x"})
	require.ErrorIs(t, err, jobs.ErrSessionLost)
	took := time.Since(start)
	t.Logf("session_lost after %s", took.Round(time.Millisecond))
	require.Less(t, took, 15*time.Second)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, jobs.SessionLost, info.State)
	require.Contains(t, info.Reason, "stopped")
}

// TestSessionShutdown: SIGTERM lets a running cell finish, then closes the
// sessions with a reason.
func TestSessionShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("--concurrency", "1", "--max-sessions", "2")
	s := openSession(t, e, jobs.SessionSpec{Lang: "bash"})
	done := make(chan cellOutcome, 1)
	go func() {
		r, err := s.Exec(context.Background(), jobs.Cell{ID: "c1", Stream: true, Code: "echo started; sleep 2; echo finished"})
		done <- cellOutcome{r, err}
	}()
	waitStreamed(t, e, jobs.CellStreamID(s.ID(), "c1"), "started")
	w.signal(syscall.SIGTERM)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, "started\nfinished\n", r.r.Stdout, "the in-flight cell finished")
	require.NoError(t, w.wait(time.Minute))
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, jobs.SessionClosed, info.State)
	require.Contains(t, info.Reason, "shut down")
	require.Empty(t, e.containers(w.owner), "no container left")
}

// TestFiftySessions: 50 sessions open at once on one worker, each with its
// own state.
func TestFiftySessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("--concurrency", "1", "--max-sessions", "50")
	const n = 50
	sessions := make([]*client.Session, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			s, err := e.client.OpenSession(ctx, jobs.SessionSpec{Lang: "bash", Limits: jobs.Limits{MemoryMB: 32}})
			if err != nil {
				errs <- err
				return
			}
			sessions[i] = s
			if _, err := s.Exec(ctx, jobs.Cell{Code: fmt.Sprintf("N=%d", i)}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, s := range sessions {
			_ = s.Close(context.Background())
		}
	})
	running := 0
	for _, c := range e.containers(w.owner) {
		if c.Labels[sandbox.LabelPool] != "" {
			running++
		}
	}
	require.GreaterOrEqual(t, running, n, "a container per session")
	for i, s := range sessions {
		r := execCell(t, s, "echo $N")
		require.Equal(t, fmt.Sprintf("%d\n", i), r.Stdout)
	}
	// On an engine that refuses the OOM pin (a nested one), the worker's
	// probe learnt it: no session container's start failed first for
	// asking (50 at once each did, loading the machine).
	require.NotRegexp(t, `"pool":"sessions".*cannot grant CAP_SYS_RESOURCE`, w.logs())
}

// TestSessionCLI drives `enqueue session` and `enqueue repl` against a
// real worker: create prints the ID alone, exec prints output and the
// displayed result and mirrors the cell's status in its exit code, files
// go up and down byte-exact, close ends it; the REPL keeps state over
// piped cells.
func TestSessionCLI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1", "--max-sessions", "2")
	run := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := e.enqueueCmd(args...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), errb.String(), code
	}
	out, stderr, code := run("", "session", "create", "--lang", "python")
	require.Equal(t, 0, code, stderr)
	id := strings.TrimSpace(out)
	require.Regexp(t, `^[0-9a-f]{32}$`, id, "the ID alone on stdout")

	_, stderr, code = run("x = 41\nprint('set')", "session", "exec", id, "-")
	require.Equal(t, 0, code, stderr)
	out, _, code = run("x + 1", "session", "exec", id, "-")
	require.Equal(t, 0, code)
	require.Equal(t, "42\n", out)
	_, stderr, code = run("1/0", "session", "exec", id, "-")
	require.Equal(t, 1, code, "a cell that raises exits 1")
	require.Contains(t, stderr, "ZeroDivisionError")
	_, _, code = run("while True: pass", "session", "exec", "--timeout", "1s", id, "-")
	require.Equal(t, 124, code, "a timed-out cell exits 124")
	out, _, code = run("x", "session", "exec", "--json", id, "-")
	require.Equal(t, 0, code)
	var r jobs.CellResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "41", r.Results[0].Data["text/plain"], "state survived the error and the timeout")

	local := filepath.Join(t.TempDir(), "blob.bin")
	blob := bytes.Repeat([]byte{0, 1, 2, 254, 255}, 1000)
	require.NoError(t, os.WriteFile(local, blob, 0o644))
	_, stderr, code = run("", "session", "upload", id, local, "in/blob.bin")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = run("", "session", "download", id, "in/blob.bin", "-")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, blob, []byte(out), "byte-exact")
	out, _, code = run("", "session", "files", id)
	require.Equal(t, 0, code)
	require.Contains(t, out, "in/blob.bin")
	_, stderr, code = run("", "session", "download", id, "../etc/passwd", "-")
	require.NotEqual(t, 0, code, "a path outside the work dir: %s", stderr)
	_, stderr, code = run("", "session", "close", id)
	require.Equal(t, 0, code, stderr)
	_, _, code = run("x", "session", "exec", id, "-")
	require.Equal(t, 3, code, "a closed session exits 3")

	out, stderr, code = run("x = 6\nprint(x * 7)\n", "repl", "--lang", "python")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "42")
}

// waitStreamed waits until the live output stream id holds want.
func waitStreamed(t *testing.T, e *env, id, want string) {
	t.Helper()
	key := e.client.Store().StreamKey(id)
	require.Eventually(t, func() bool {
		entries, err := e.rdb.XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			return false
		}
		for _, en := range entries {
			for _, v := range en.Values {
				if s, ok := v.(string); ok && strings.Contains(s, want) {
					return true
				}
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "%q in the stream %s", want, id)
}
