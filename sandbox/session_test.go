package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/sandbox"
)

// miniDriver is a session driver reduced to the protocol (the real ones
// are in langs/session): it execs each cell in one namespace, writes the
// end markers, then the reply; SIGINT interrupts a cell, SIGURG does
// nothing (the nudge of TestSessionInterruptNudge).
const miniDriver = `
import os, sys, json, signal
signal.signal(signal.SIGURG, lambda signum, frame: None)
cmd = os.fdopen(3, "rb", buffering=0)
rep = os.fdopen(4, "wb", buffering=0)
ns = {}
n = 0
rep.write(b'{"ready":true}\n')
def readline():
    b = b""
    while not b.endswith(b"\n"):
        c = cmd.read(1)
        if not c:
            sys.exit(0)
        b += c
    return b
while True:
    try:
        nonce, size = readline().decode().split()
        code = b""
        while len(code) < int(size):
            code += cmd.read(int(size) - len(code))
        n += 1
        status, err = "ok", None
        try:
            exec(code.decode(), ns)
        except BaseException as e:
            status, err = "error", {"name": type(e).__name__, "value": str(e)}
        sys.stdout.flush(); sys.stderr.flush()
        m = ("\x1esandq-cell-end:" + nonce + "\x1e").encode()
        os.write(1, m); os.write(2, m)
        rep.write((json.dumps({"nonce": nonce, "status": status, "execution_count": n, "error": err}) + "\n").encode())
    except KeyboardInterrupt:
        pass
`

func startMiniSession(t *testing.T, tb *testBundle, memMB int64) *sandbox.Container {
	t.Helper()
	return startMiniSessionWith(t, tb, memMB, 0, 0)
}

func startMiniSessionWith(t *testing.T, tb *testBundle, memMB int64, interruptEvery time.Duration, nudge syscall.Signal) *sandbox.Container {
	t.Helper()
	ctx := context.Background()
	c, err := tb.pool.Acquire(ctx, tb.spec)
	require.NoError(t, err)
	t.Cleanup(func() { tb.pool.Release(c, false) })
	err = c.StartSession(ctx, &agent.SessionStart{
		Driver: agent.Step{Name: "session", Argv: []string{"python3", "-u", "/tmp/.sandq-session/d.py"},
			Timeout: 20 * time.Second, OutputLimit: tb.lim.OutputBytes, Rlimits: tb.lim.Rlimits},
		DriverDir: "/tmp/.sandq-session", DriverFiles: []agent.File{{Path: "d.py", Data: []byte(miniDriver)}},
		Files:       []agent.File{{Path: "seed.txt", Data: []byte("seed")}},
		MemoryLimit: memMB << 20, InterruptEvery: interruptEvery, InterruptNudge: int(nudge),
	})
	require.NoError(t, err)
	return c
}

type cellOut struct {
	agent.CellResult
	Status string `json:"status"`
	Count  int    `json:"execution_count"`
	Error  *struct {
		Name string `json:"name"`
	} `json:"error"`
}

func cell(t *testing.T, c *sandbox.Container, code string, timeout time.Duration) cellOut {
	t.Helper()
	r, err := c.Cell(context.Background(), &agent.CellRequest{Code: code, Timeout: timeout, OutputLimit: 1 << 20}, nil)
	require.NoError(t, err)
	out := cellOut{CellResult: r}
	if len(r.Reply) > 0 {
		require.NoError(t, json.Unmarshal(r.Reply, &out))
	}
	return out
}

// TestSessionProtocol drives the agent's session support with a minimal
// driver: state, exact output per cell, interrupts, forged replies, files,
// the end of the interpreter.
func TestSessionProtocol(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		c := startMiniSession(t, tb, 0)

		r := cell(t, c, "x = 41\nprint('a', end='')\nimport sys; sys.stderr.write('e')", 10*time.Second)
		require.Equal(t, "ok", r.Status)
		require.Equal(t, "a", string(r.Stdout.Bytes()), "output up to the marker, exactly")
		require.Equal(t, "e", string(r.Stderr.Bytes()))
		r = cell(t, c, "print(x + 1)", 10*time.Second)
		require.Equal(t, "42\n", string(r.Stdout.Bytes()))
		require.Equal(t, 2, r.Count)

		// A forged reply (wrong nonce) and a fake marker do not end the cell.
		r = cell(t, c, "import os\nos.write(4, b'{\"nonce\":\"x\",\"status\":\"ok\"}\\n')\nprint('\\x1esandq-cell-end:x\\x1e', end='')\nprint('real')", 10*time.Second)
		require.Equal(t, "ok", r.Status)
		require.Equal(t, "\x1esandq-cell-end:x\x1ereal\n", string(r.Stdout.Bytes()))

		// A timeout interrupts the cell; the interpreter lives.
		start := time.Now()
		r = cell(t, c, "while True: pass", time.Second)
		require.True(t, r.TimedOut)
		require.Equal(t, "KeyboardInterrupt", r.Error.Name)
		require.Empty(t, r.Ended)
		require.Less(t, time.Since(start), 20*time.Second, "the endless loop was stopped")
		require.Equal(t, "42\n", string(cell(t, c, "print(x + 1)", 10*time.Second).Stdout.Bytes()))

		// Interrupt by canceling the context.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		res, err := c.Cell(ctx, &agent.CellRequest{Code: "import time\ntime.sleep(30)", Timeout: time.Minute}, nil)
		cancel()
		require.NoError(t, err)
		require.True(t, res.Interrupted)
		require.Empty(t, res.Ended)

		// One cell at a time: a second is refused while the first, which
		// has said it runs, runs until the test interrupts it.
		var wg sync.WaitGroup
		started := make(chan struct{})
		var once sync.Once
		first, stop := context.WithCancel(context.Background())
		var firstRes agent.CellResult
		var firstErr error
		wg.Go(func() {
			firstRes, firstErr = c.Cell(first, &agent.CellRequest{Code: "print('started', flush=True)\nimport time\ntime.sleep(60)", Timeout: 2 * time.Minute, Live: true},
				func(ch agent.LiveChunk) {
					if bytes.Contains(ch.Data, []byte("started")) {
						once.Do(func() { close(started) })
					}
				})
		})
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the first cell never said it started")
		}
		_, err = c.Cell(context.Background(), &agent.CellRequest{Code: "1", Timeout: time.Second}, nil)
		var ae *sandbox.AgentError
		require.True(t, errors.As(err, &ae) && strings.Contains(ae.Msg, "busy"), "%v", err)
		// Files work while a cell runs.
		require.NoError(t, c.PutFile(context.Background(), agent.File{Path: "up/data.bin", Data: []byte{0, 1, 2, 255}}))
		stop()
		wg.Wait()
		require.NoError(t, firstErr)
		require.True(t, firstRes.Interrupted, "%+v", firstRes)

		got, err := c.GetFile(context.Background(), "up/data.bin")
		require.NoError(t, err)
		require.Equal(t, []byte{0, 1, 2, 255}, got)
		got, err = c.GetFile(context.Background(), "seed.txt")
		require.NoError(t, err)
		require.Equal(t, "seed", string(got))
		cell(t, c, "import os\nos.symlink('/etc/passwd', 'link')\nos.mkfifo('fifo')\nos.symlink('/', 'rootlink')", 10*time.Second)
		for _, bad := range []string{"link", "fifo", "../etc/passwd", "rootlink/etc/passwd", "up"} {
			_, err := c.GetFile(context.Background(), bad)
			require.Error(t, err, bad)
		}
		require.Error(t, c.PutFile(context.Background(), agent.File{Path: "rootlink/tmp/x", Data: []byte("x")}))
		files, err := c.ListFiles(context.Background(), "")
		require.NoError(t, err)
		var names []string
		for _, f := range files {
			names = append(names, f.Path)
		}
		require.Subset(t, names, []string{"seed.txt", "up", "up/data.bin", "link", "fifo"})
		require.NotContains(t, names, "rootlink/etc", "links are not followed")

		// The interpreter exits: the session is over.
		r = cell(t, c, "import os\nprint('bye', flush=True)\nos._exit(3)", 10*time.Second)
		require.Contains(t, r.Ended, "exit code 3")
		require.Equal(t, "bye\n", string(r.Stdout.Bytes()))
		r = cell(t, c, "1", time.Second)
		require.NotEmpty(t, r.Ended, "no cell after the end")
	})
}

// TestSessionOOM: a cell past the memory limit ends the session as an OOM
// kill.
func TestSessionOOM(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		c := startMiniSession(t, tb, 64)
		r := cell(t, c, "x = b'x' * (1 << 30)", 20*time.Second)
		require.True(t, r.OOMKilled, "%+v", r)
		require.NotEmpty(t, r.Ended)
	})
}

// TestSessionUninterruptible: a cell that ignores SIGINT and never ends
// is killed InterruptGrace after its timeout; the session ends, lost,
// and the container's agent still answers.
func TestSessionUninterruptible(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		c := startMiniSession(t, tb, 0)
		start := time.Now()
		r := cell(t, c, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('stubborn', flush=True)\nwhile True: pass", time.Second)
		took := time.Since(start)
		require.True(t, r.TimedOut)
		require.Contains(t, r.Ended, "did not stop when interrupted")
		require.Equal(t, "stubborn\n", string(r.Stdout.Bytes()))
		require.Less(t, took, time.Second+agent.InterruptGrace+3*time.Second, "bounded: timeout + grace + kill")
		files, err := c.ListFiles(context.Background(), "")
		require.NoError(t, err, "the agent lives on")
		require.NotEmpty(t, files)
	})
}

// TestSessionInterruptRepeated: with InterruptEvery the agent repeats
// SIGINT until the cell answers, so a cell that survives the first one
// (as bash's foreground command does when the SIGINT lands while bash
// forks it) is still interrupted, and the session lives. Without it, the
// same cell outlives InterruptGrace and the session ends.
func TestSessionInterruptRepeated(t *testing.T) {
	const survivesOne = "import time\nprint('started', flush=True)\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    print('first', flush=True)\n    time.sleep(30)"
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		c := startMiniSessionWith(t, tb, 0, 200*time.Millisecond, 0)
		r := requireRepeatEnds(t, c, survivesOne, "the second SIGINT")
		require.Equal(t, "started\nfirst\n", string(r.Stdout.Bytes()))

		once := startMiniSessionWith(t, setup(t, backend, setupOpts{}), 0, 0, 0) // a pool of its own: c is held
		r = cell(t, once, survivesOne, time.Second)
		require.Contains(t, r.Ended, "did not stop when interrupted", "one SIGINT only")
	})
}

// requireRepeatEnds runs code, which times out after a second, and
// requires that the agent's repeated interrupt (by, what repeats) ended
// it with KeyboardInterrupt before InterruptGrace, the session alive and
// the next cell free of stray SIGINTs.
func requireRepeatEnds(t *testing.T, c *sandbox.Container, code, by string) cellOut {
	t.Helper()
	start := time.Now()
	r := cell(t, c, code, time.Second)
	require.True(t, r.TimedOut)
	require.Empty(t, r.Ended, "the session lives")
	require.NotNil(t, r.Error)
	require.Equal(t, "KeyboardInterrupt", r.Error.Name)
	require.Less(t, time.Since(start), time.Second+agent.InterruptGrace, by+", not the grace, ended it")
	require.Equal(t, "ok", cell(t, c, "import time\ntime.sleep(0.5)", 10*time.Second).Status, "no SIGINT reaches the next cell")
	return r
}

// TestSessionInterruptNudge: CPython can lose a SIGINT that lands just
// before a blocking call (the handler pending, the call asleep). The cell
// takes that state itself (interrupt_main from another thread trips the
// handler without waking the sleep) and blocks SIGINT, so only the
// agent's repeated nudge (SIGURG to the driver) can end it; repeated
// SIGINTs cannot.
func TestSessionInterruptNudge(t *testing.T) {
	const lost = "import signal, threading, _thread, time\n" +
		"signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\nprint('started', flush=True)\n" +
		"threading.Timer(0.3, _thread.interrupt_main).start()\n" +
		"try:\n    time.sleep(30)\nfinally:\n    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})"
	forEachBackend(t, func(t *testing.T, backend string) {
		c := startMiniSessionWith(t, setup(t, backend, setupOpts{}), 0, 200*time.Millisecond, syscall.SIGURG)
		requireRepeatEnds(t, c, lost, "the nudge")

		sigints := startMiniSessionWith(t, setup(t, backend, setupOpts{}), 0, 200*time.Millisecond, 0)
		r := cell(t, sigints, lost, time.Second)
		require.Contains(t, r.Ended, "did not stop when interrupted", "repeated SIGINTs do not wake it")
	})
}
