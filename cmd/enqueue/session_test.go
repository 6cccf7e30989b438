package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// The session commands run against a FakeSessionWorker (jobstest): real
// Redis and the real routing of session commands, cells answered by their
// code ("# ERROR", "# SLEEP", ...; anything else echoes the code).

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), s)
	return v
}

func TestSessionCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ns.StartFakeSessionWorker(t, 2)
	dir := t.TempDir()
	local := filepath.Join(dir, "in.txt")
	require.NoError(t, os.WriteFile(local, []byte("hello\n"), 0o644))

	res := b.cli(t, "", "session", "create", "--lang", "py", "--id", "s1", "--file", local+":in/x.txt", "--env", "A=1",
		"--timeout", "30s", "--idle-ttl", "90s", "--memory", "128")
	require.Equal(t, result{code: 0, stdout: "s1\n"}, res)
	res = b.cli(t, "", "session", "info", "s1")
	require.Equal(t, 0, res.code, res.stderr)
	info := decodeJSON[jobs.SessionInfo](t, res.stdout)
	require.Equal(t, jobs.SessionReady, info.State)
	require.Equal(t, "python", info.Lang)
	require.Equal(t, 90, info.IdleTTLSeconds)
	require.Equal(t, jobs.Limits{TimeoutMS: 30_000, MemoryMB: 128}, info.Limits)

	// exec: the cell's output, results and traceback; the exit status
	// mirrors its status.
	res = b.cli(t, "print(1)\n", "session", "exec", "s1", "-")
	require.Equal(t, result{code: 0, stdout: "print(1)\n"}, res)
	cellFile := filepath.Join(dir, "cell.py")
	require.NoError(t, os.WriteFile(cellFile, []byte("y = 2"), 0o644))
	res = b.cli(t, "", "session", "exec", "s1", cellFile)
	require.Equal(t, result{code: 0, stdout: "y = 2"}, res)
	res = b.cli(t, "# ERROR", "session", "exec", "s1")
	require.Equal(t, result{code: 1, stderr: "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\nValueError: bad value\n"}, res,
		"no FILE: stdin, as it is not a terminal")
	res = b.cli(t, "# ERROR", "session", "exec", "--json", "s1", "-")
	require.Equal(t, 1, res.code)
	r := decodeJSON[jobs.CellResult](t, res.stdout)
	require.Equal(t, jobs.CellError, r.Status)
	require.Equal(t, 4, r.ExecutionCount)
	res = b.cli(t, "# TIMEOUT", "session", "exec", "s1", "-")
	require.Equal(t, result{code: 124, stdout: "partial\n", stderr: "sandq: the cell timed out and was interrupted; the session lives on\n"}, res)
	res = b.cli(t, "# DISPLAY", "session", "exec", "s1", "-")
	require.Equal(t, result{code: 0, stdout: "42\n<Figure size 640x480 with 1 Axes>\n[image/png 8 bytes]\n"}, res)
	res = b.cli(t, "print('live')\n", "session", "exec", "--follow", "s1", "-")
	require.Equal(t, result{code: 0, stdout: "print('live')\n"}, res, "shown live, not again after")
	res = b.cli(t, "x", "session", "exec", "--timeout", "-1s", "s1", "-")
	require.Equal(t, 64, res.code, res.stderr)
	require.Contains(t, res.stderr, "invalid cell: timeout_ms (--timeout)")

	// Files, byte-exact.
	bin := filepath.Join(dir, "a.bin")
	data := []byte{0, 0xff, 1, '\n'}
	require.NoError(t, os.WriteFile(bin, data, 0o644))
	res = b.cli(t, "", "session", "upload", "s1", bin, "data/a.bin")
	require.Equal(t, result{code: 0}, res)
	res = b.cli(t, "from stdin", "session", "upload", "s1", "-", "b.txt")
	require.Equal(t, result{code: 0}, res)
	res = b.cli(t, "", "session", "download", "s1", "data/a.bin", "-")
	require.Equal(t, result{code: 0, stdout: string(data)}, res)
	out := filepath.Join(dir, "copy.bin")
	res = b.cli(t, "", "session", "download", "s1", "data/a.bin", out)
	require.Equal(t, result{code: 0}, res)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, data, got)
	res = b.cli(t, "", "session", "upload", "s1", bin, "../a.bin")
	require.Equal(t, 64, res.code, res.stderr)
	res = b.cli(t, "", "session", "files", "s1")
	require.Equal(t, result{code: 0, stdout: "" +
		"SIZE  MODE        MTIME                 PATH\n" +
		"  10  -rw-r--r--  2023-11-14T22:13:20Z  b.txt\n" +
		"   4  -rw-r--r--  2023-11-14T22:13:20Z  data/a.bin\n" +
		"   6  -rw-r--r--  2023-11-14T22:13:20Z  in/x.txt\n"}, res)
	res = b.cli(t, "", "session", "files", "--json", "s1", "data")
	require.Equal(t, 0, res.code, res.stderr)
	require.Len(t, decodeJSON[[]jobs.FileEntry](t, res.stdout), 1)

	res = b.cli(t, "", "session", "list")
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 2)
	require.Regexp(t, `^ID +STATE +LANG +CELLS +CREATED +LAST USED +REASON$`, lines[0])
	require.Regexp(t, `^s1 +ready +python +7 +20\d\d-`, lines[1])
	res = b.cli(t, "", "session", "list", "--tenant", "other", "--json")
	require.Equal(t, result{code: 0, stdout: "[]\n"}, res)
	res = b.cli(t, "", "session", "interrupt", "s1")
	require.Equal(t, result{code: 0}, res)

	res = b.cli(t, "", "session", "close", "s1")
	require.Equal(t, result{code: 0, stdout: "session s1 closed\n"}, res)
	res = b.cli(t, "", "session", "close", "s1")
	require.Equal(t, result{code: 0, stdout: "session s1 had already ended (closed: closed by its owner)\n"}, res)
	res = b.cli(t, "print(1)", "session", "exec", "s1", "-")
	require.Equal(t, result{code: 3, stderr: "enqueue: session s1: session ended (closed): closed by its owner\n"}, res)
	res = b.cli(t, "", "session", "info", "nope")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, "session nope not found")

	// A cell that kills the interpreter: 137 for oom.
	res = b.cli(t, "", "session", "create", "--lang", "python", "--id", "s2")
	require.Equal(t, 0, res.code, res.stderr)
	res = b.cli(t, "# OOM", "session", "exec", "s2", "-")
	require.Equal(t, result{code: 137, stderr: "sandq: session s2 ended during the cell (oom): the interpreter was killed for memory\n"}, res)
}

func TestSessionCreateErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.cli(t, "", "session", "create", "--lang", "python")
	require.Equal(t, 75, res.code, "no worker takes sessions: %s", res.stderr)
	require.Contains(t, res.stderr, "no free session slot")
	res = b.cli(t, "", "session", "create", "--lang", "go")
	require.Equal(t, 64, res.code)
	require.Contains(t, res.stderr, "enqueue: invalid session: lang (--lang): go has no sessions; sessions support: ")
	res = b.cli(t, "", "session", "create")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, `"lang" not set`)
	res = b.cli(t, "", "session", "create", "--lang", "python", "--idle-ttl", "-1s")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, "--idle-ttl -1s is negative")
	res = b.cli(t, "", "session", "create", "--lang", "python", "--env", "NOEQUALS")
	require.Equal(t, 2, res.code)
	require.Contains(t, res.stderr, "want KEY=VALUE")

	b.ns.StartFakeSessionWorker(t, 2)
	res = b.cli(t, "", "session", "create", "--lang", "python", "--id", "dup")
	require.Equal(t, result{code: 0, stdout: "dup\n"}, res)
	res = b.cli(t, "", "session", "create", "--lang", "python", "--id", "dup")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "session dup exists")
	res = b.cli(t, "", "session", "create", "--lang", "python")
	require.Equal(t, 0, res.code, "the slot the refused create took is back: %s", res.stderr)
	res = b.cli(t, "", "session", "create", "--lang", "python")
	require.Equal(t, 75, res.code, "both slots are taken: %s", res.stderr)
}

func TestReplPiped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ns.StartFakeSessionWorker(t, 2)
	in := "x = 1\n\n\ndef f():\n    return x\n\nprint(f())\n# ERROR\nlast = [1,\n  2]"
	res := b.cli(t, in, "repl", "--id", "r1")
	require.Equal(t, result{code: 0,
		stdout: "x = 1\ndef f():\n    return x\nprint(f())\nlast = [1,\n  2]\n",
		stderr: "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\nValueError: bad value\n"}, res)
	res = b.cli(t, "", "session", "info", "r1")
	info := decodeJSON[jobs.SessionInfo](t, res.stdout)
	require.Equal(t, jobs.SessionClosed, info.State, "closed at the end of the input")
	require.Equal(t, 5, info.ExecutionCount)
	require.Equal(t, "python", info.Lang, "python by default")

	// The session dies under the REPL: it stops there, with the cell's
	// status.
	res = b.cli(t, "# OOM\nprint(1)\n", "repl", "--id", "r2")
	require.Equal(t, 137, res.code, res.stderr)
	require.Empty(t, res.stdout)
}

// Ctrl-C while a cell runs interrupts the cell; the REPL goes on.
func TestReplInterruptsTheCell(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.ns.StartFakeSessionWorker(t, 2)
	var sigc chan<- os.Signal
	a := &app{
		stdin:      strings.NewReader("# SLEEP\nprint(2)\n"),
		notify:     func(c chan<- os.Signal) { sigc = c },
		stopNotify: func(chan<- os.Signal) {},
	}
	var once sync.Once
	a.waitHook = func(id string) {
		once.Do(func() {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for !w.Busy(id) && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				if w.Busy(id) {
					sigc <- os.Interrupt
				}
			}()
		})
	}
	res := b.cliApp(t, a, "repl", "--id", "r3")
	require.Equal(t, result{code: 0, stdout: "print(2)\n", stderr: "sandq: interrupting the cell\nKeyboardInterrupt\n"}, res)
}

func TestCellSplitter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		in   string
		want []string
	}{
		{"one line each", "a = 1\nb = 2\n", []string{"a = 1\n", "b = 2\n"}},
		{"blank lines between", "\n\na\n  \n\nb", []string{"a\n", "b\n"}},
		{"block ends at a blank line", "def f():\n    return 1\n\nf()\n", []string{"def f():\n    return 1\n", "f()\n"}},
		{"block with blank line in brackets", "if x:\n    y = (\n\n    1)\n\n", []string{"if x:\n    y = (\n\n    1)\n"}},
		{"block at the end of input", "for i in r:\n    print(i)", []string{"for i in r:\n    print(i)\n"}},
		{"bracket", "x = [1,\n 2,\n 3]\ny", []string{"x = [1,\n 2,\n 3]\n", "y\n"}},
		{"backslash", "x = 1 + \\\n  2\n", []string{"x = 1 + \\\n  2\n"}},
		{"triple-quoted string", "s = '''a\n\nb'''\nt", []string{"s = '''a\n\nb'''\n", "t\n"}},
		{"colon in a string or comment", "d = {'a': 1}\ns = 'x:'\ny = 1  # note:\n", []string{"d = {'a': 1}\n", "s = 'x:'\n", "y = 1  # note:\n"}},
		{"bracket in a string", "s = '('\nt = \"[\"\n", []string{"s = '('\n", "t = \"[\"\n"}},
		{"colon then comment", "while True:  # forever\n    pass\n\n", []string{"while True:  # forever\n    pass\n"}},
		{"javascript braces", "function f() {\n  return 1;\n}\nf()", []string{"function f() {\n  return 1;\n}\n", "f()\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var s cellSplitter
			var got []string
			for line := range strings.SplitSeq(tt.in, "\n") {
				if s.add(line) {
					got = append(got, s.take())
				}
			}
			if s.pending() {
				got = append(got, s.take())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCellExitCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r    jobs.CellResult
		want int
	}{
		{jobs.CellResult{Status: jobs.CellOK}, 0},
		{jobs.CellResult{Status: jobs.CellError}, 1},
		{jobs.CellResult{Status: jobs.CellTimeout}, 124},
		{jobs.CellResult{Status: jobs.CellSessionEnded, Session: jobs.SessionOOM}, 137},
		{jobs.CellResult{Status: jobs.CellSessionEnded, Session: jobs.SessionLost}, 3},
		{jobs.CellResult{Status: "new"}, 70},
	} {
		require.Equal(t, tt.want, cellExitCode(tt.r), "%+v", tt.r)
	}
}

func TestWriteCell(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name           string
		r              jobs.CellResult
		shown          liveShown
		stdout, stderr string
	}{
		{name: "output", r: jobs.CellResult{Status: jobs.CellOK, Stdout: "out\n", Stderr: "warn\n"}, stdout: "out\n", stderr: "warn\n"},
		{name: "results after output without a newline",
			r: jobs.CellResult{Status: jobs.CellOK, Stdout: "a", Results: []jobs.Display{
				{Data: map[string]string{"text/plain": "'x'\n"}}, {Data: map[string]string{"image/svg+xml": "<svg/>"}},
				{Data: map[string]string{"image/png": "iVBORw0KGgo=", "text/html": "<b>x</b>"}},
				{Data: map[string]string{"image/png": ""}, Artifact: "plots/p.png", URL: "/a/p.png"}}},
			stdout: "a\n'x'\n[image/svg+xml 6 bytes]\n[image/png 8 bytes]\n[text/html 8 bytes]\n[image/png 0 bytes]\n[stored as artifact plots/p.png: /a/p.png]\n"},
		{name: "error without traceback", r: jobs.CellResult{Status: jobs.CellError, Error: &jobs.CellErrorInfo{Name: "KeyError", Value: "'k'"}},
			stderr: "KeyError: 'k'\n"},
		{name: "shown live", r: jobs.CellResult{Status: jobs.CellOK, Stdout: "live\n", Stderr: "e", Results: []jobs.Display{{Data: map[string]string{"text/plain": "1"}}}},
			shown: liveShown{stdout: 5, stderr: 1, last: '\n'}, stdout: "1\n"},
		{name: "notes", r: jobs.CellResult{Status: jobs.CellSessionEnded, Session: jobs.SessionLost, StdoutTruncated: true},
			shown: liveShown{dropped: 10},
			stderr: "sandq: the cell's stdout reached its output limit: the middle was dropped\n" +
				"sandq: 10 bytes of output were not shown live (the reader or Redis fell behind); --json has the result\n" +
				"sandq: session S ended during the cell (lost): the interpreter died\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			require.NoError(t, writeCell(&stdout, &stderr, "S", tt.r, tt.shown))
			require.Equal(t, tt.stdout, stdout.String())
			require.Equal(t, tt.stderr, stderr.String())
		})
	}
}

// SIGINT while the REPL waits for input closes the session and exits 130.
func TestReplSignalWhileIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ns.StartFakeSessionWorker(t, 2)
	stdin, feed := io.Pipe()
	t.Cleanup(func() { feed.Close() })
	// The Ctrl-C comes at the second prompt: the first cell has finished
	// and the REPL waits for input (the session's execution count alone
	// can reach 1 before the REPL has seen the cell's end).
	var sigc chan<- os.Signal
	prompts := 0
	a := &app{
		stdin:      stdin,
		notify:     func(c chan<- os.Signal) { sigc = c },
		stopNotify: func(chan<- os.Signal) {},
		promptHook: func() {
			prompts++
			switch prompts {
			case 1:
				go func() { _, _ = feed.Write([]byte("print(1)\n")) }()
			case 2:
				go func() { sigc <- os.Interrupt }()
			}
		},
	}
	res := b.cliApp(t, a, "repl", "--id", "r4")
	require.Equal(t, result{code: 130, stdout: "print(1)\n", stderr: "enqueue: interrupted by SIGINT\n"}, res)
	info, err := b.store.GetSession(context.Background(), "r4")
	require.NoError(t, err)
	require.Equal(t, jobs.SessionClosed, info.State)
}

// Ctrl-C during exec interrupts the cell; the session lives on.
func TestSessionExecInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.ns.StartFakeSessionWorker(t, 2)
	res := b.cli(t, "", "session", "create", "--lang", "python", "--id", "s3")
	require.Equal(t, 0, res.code, res.stderr)
	var sigc chan<- os.Signal
	a := &app{
		stdin:      strings.NewReader("# SLEEP"),
		notify:     func(c chan<- os.Signal) { sigc = c },
		stopNotify: func(chan<- os.Signal) {},
		waitHook: func(id string) {
			go func() {
				for !w.Busy(id) {
					time.Sleep(5 * time.Millisecond)
				}
				sigc <- os.Interrupt
			}()
		},
	}
	res = b.cliApp(t, a, "session", "exec", "s3", "-")
	require.Equal(t, result{code: 130, stderr: "enqueue: interrupted by SIGINT: the cell was interrupted; the session lives on\n"}, res)
	require.Eventually(t, func() bool { return !w.Busy("s3") }, 10*time.Second, 10*time.Millisecond, "the cell was interrupted")
	res = b.cli(t, "print(3)", "session", "exec", "s3", "-")
	require.Equal(t, result{code: 0, stdout: "print(3)"}, res)
}
