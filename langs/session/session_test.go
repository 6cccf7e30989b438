package session_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/langs/session"
)

// These tests avoid cgo (no testify: it pulls in net), so that the test
// binary is static and runs as it is inside the language images, which have
// no Go (TestImages); a binary that is not static (go test -race) is rebuilt
// with CGO_ENABLED=0 for them.

const (
	readyTimeout  = 30 * time.Second
	cellTimeout   = 60 * time.Second
	markerTimeout = 5 * time.Second
	// interruptTimeout bounds the reply to an interrupted cell (the agent
	// gives a driver 3 s before it kills the session; 2 s more for a
	// loaded machine).
	interruptTimeout = 5 * time.Second
	exitTimeout      = 10 * time.Second

	// inImageEnv names the language TestInImage tests; it is set only in
	// the containers TestImages starts.
	inImageEnv = "SANDQ_SESSION_TEST_LANG"
	// chownEnv (1 or 0): TestInImage gives the pipes to the job uid, as
	// the agent should.
	chownEnv = "SANDQ_SESSION_TEST_CHOWN"
	jobUID   = 1000
)

func TestMain(m *testing.M) {
	// A Go program started with SIGINT ignored keeps it ignored, and its
	// children inherit that: bash could then never trap it. Catching it
	// here makes it SIG_DFL in the drivers, as it is under the agent.
	if signal.Ignored(os.Interrupt) {
		signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	}
	os.Exit(m.Run())
}

// --- unit tests -----------------------------------------------------------

func TestMarker(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]byte("\x1esandq-cell-end:AbC123\x1e"), session.Marker("AbC123")); diff != "" {
		t.Fatalf("Marker (-want +got):\n%s", diff)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]string{"bash", "javascript", "python", "r"}, session.Langs()); diff != "" {
		t.Fatalf("Langs (-want +got):\n%s", diff)
	}
	if _, ok := session.For("py"); ok {
		t.Fatal("For takes canonical names only")
	}
	for _, lang := range session.Langs() {
		d, ok := session.For(lang)
		if !ok {
			t.Fatalf("For(%q): no driver", lang)
		}
		l, ok := langs.Lookup(lang)
		if !ok || l.Name != lang || d.Lang != lang {
			t.Fatalf("%s: not a canonical language name of package langs", lang)
		}
		if len(d.Files) == 0 || len(d.Argv) == 0 {
			t.Fatalf("%s: no files or no argv", lang)
		}
		for _, f := range d.Files {
			// The agent takes plain names only.
			if f.Path != filepath.Base(f.Path) || f.Path == "" || len(f.Data) == 0 {
				t.Fatalf("%s: bad file %q", lang, f.Path)
			}
			if !slices.Contains(d.Argv, session.Dir+"/"+f.Path) {
				t.Fatalf("%s: argv %q does not run %s", lang, d.Argv, f.Path)
			}
		}
		for _, kv := range d.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || k == "SANDQ_PLOTS_DIR" {
				t.Fatalf("%s: bad env %q", lang, kv)
			}
		}
		// For hands out copies.
		d.Argv[0] = "changed"
		if again, _ := session.For(lang); again.Argv[0] == "changed" {
			t.Fatalf("%s: For shares its slices", lang)
		}
	}
}

// --- the harness: a driver started as the agent starts it -----------------

type startOpts struct {
	driverDir string // replaces session.Dir in the argv
	workDir   string
	env       []string
	cred      *syscall.Credential
	chown     bool // give the pipes to cred's uid
}

type proc struct {
	t       testing.TB
	lang    string
	pid     int
	cmdW    *os.File
	replies chan []byte
	stdout  *stream
	stderr  *stream
	exited  chan struct{}
	state   *os.ProcessState
	count   int // cells sent
	ready   time.Duration
	sentAt  map[string]time.Time
	pipes   []string // the command and reply pipes, as /proc/*/fd shows them
	// intrEvery and nudge are the driver's InterruptEvery and
	// InterruptNudge; repeating is set while an interrupted cell has not
	// answered (as the agent does it).
	intrEvery time.Duration
	nudge     syscall.Signal
	repeating bool
}

// cellOut is what one cell did.
type cellOut struct {
	reply  session.Reply
	raw    string
	stdout string
	stderr string
	rtt    time.Duration // from writing the command to reading the reply
}

// stream collects one output pipe of the driver.
type stream struct {
	mu   sync.Mutex
	buf  []byte
	eof  bool
	wake chan struct{} // closed when buf grows or at EOF
}

func newStream(r io.Reader) *stream {
	s := &stream{wake: make(chan struct{})}
	go func() {
		b := make([]byte, 32<<10)
		for {
			n, err := r.Read(b)
			s.mu.Lock()
			s.buf = append(s.buf, b[:n]...)
			if err != nil {
				s.eof = true
			}
			close(s.wake)
			s.wake = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

// until waits for f to accept the buffer; f returns how many bytes to
// consume, or -1.
func (s *stream) until(d time.Duration, f func([]byte) int) (int, []byte, bool) {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		n := f(s.buf)
		if n >= 0 {
			got := slices.Clone(s.buf[:n])
			s.buf = s.buf[n:]
			s.mu.Unlock()
			return n, got, true
		}
		wake, eof := s.wake, s.eof
		snapshot := slices.Clone(s.buf)
		s.mu.Unlock()
		if eof {
			return -1, snapshot, false
		}
		select {
		case <-wake:
		case <-deadline:
			return -1, snapshot, false
		}
	}
}

func start(t testing.TB, d session.Driver, o startOpts) *proc {
	t.Helper()
	argv := slices.Clone(d.Argv)
	if o.driverDir != "" {
		for i, a := range argv {
			argv[i] = strings.ReplaceAll(a, session.Dir, o.driverDir)
		}
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if o.chown && o.cred != nil {
		for _, f := range []*os.File{cmdR, repW} {
			if err := f.Chown(int(o.cred.Uid), int(o.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = o.workDir
	cmd.Env = append(o.env, d.Env...)
	cmd.Stdout, cmd.Stderr = outW, errW // fd 0 is /dev/null
	cmd.ExtraFiles = []*os.File{cmdR, repW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: o.cred}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", d.Lang, err)
	}
	for _, f := range []*os.File{cmdR, repW, outW, errW} {
		f.Close()
	}
	p := &proc{
		t: t, lang: d.Lang, pid: cmd.Process.Pid, cmdW: cmdW, intrEvery: d.InterruptEvery, nudge: d.InterruptNudge,
		replies: make(chan []byte, 16), exited: make(chan struct{}),
		stdout: newStream(outR), stderr: newStream(errR), sentAt: map[string]time.Time{},
	}
	for _, f := range []*os.File{cmdW, repR} {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		p.pipes = append(p.pipes, fmt.Sprintf("pipe:[%d]", st.Ino))
	}
	go func() {
		defer close(p.replies)
		br := bufio.NewReaderSize(repR, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			p.replies <- line
		}
	}()
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.exited
		cmdW.Close()
		repR.Close()
	})
	select {
	case line, ok := <-p.replies:
		if !ok || string(line) != "{\"ready\":true}\n" {
			p.fatalf("no ready line, got %q", line)
		}
	case <-time.After(readyTimeout):
		p.fatalf("no ready line within %s", readyTimeout)
	}
	p.ready = time.Since(begin)
	t.Logf("%s driver ready in %s", d.Lang, p.ready.Round(time.Millisecond))
	return p
}

// fatalf fails the test with what the driver wrote so far.
func (p *proc) fatalf(format string, args ...any) {
	p.t.Helper()
	p.stdout.mu.Lock()
	out := string(p.stdout.buf)
	p.stdout.mu.Unlock()
	p.stderr.mu.Lock()
	errs := string(p.stderr.buf)
	p.stderr.mu.Unlock()
	p.t.Fatalf("%s: %s\nunread stdout: %q\nunread stderr: %q", p.lang, fmt.Sprintf(format, args...), out, errs)
}

func newNonce() string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

// send writes one command and returns its nonce.
func (p *proc) send(code string) string {
	p.t.Helper()
	nonce := newNonce()
	p.count++
	p.sentAt[nonce] = time.Now()
	if _, err := p.cmdW.Write([]byte(nonce + " " + fmt.Sprint(len(code)) + "\n" + code)); err != nil {
		p.fatalf("write command: %v", err)
	}
	return nonce
}

// wait reads the reply to nonce and the cell's output up to its markers.
func (p *proc) wait(nonce string) cellOut {
	p.t.Helper()
	return p.waitWithin(nonce, cellTimeout)
}

func (p *proc) waitWithin(nonce string, timeout time.Duration) cellOut {
	p.t.Helper()
	var c cellOut
	var again <-chan time.Time
	if p.repeating {
		// Repeat the interrupt as the agent does (Driver.InterruptEvery).
		tick := time.NewTicker(p.intrEvery)
		defer tick.Stop()
		again = tick.C
	}
	expire := time.After(timeout)
	for {
		select {
		case <-again:
			pid, sig := -p.pid, syscall.SIGINT
			if p.nudge != 0 {
				pid, sig = p.pid, p.nudge
			}
			if err := syscall.Kill(pid, sig); err != nil {
				p.fatalf("repeat the interrupt (%v): %v", sig, err)
			}
			continue
		case line, ok := <-p.replies:
			p.repeating = false
			if !ok {
				<-p.exited
				p.fatalf("driver gone (%v) before the reply", p.state)
			}
			c.rtt = time.Since(p.sentAt[nonce])
			c.raw = string(line)
			if err := json.Unmarshal(line, &c.reply); err != nil {
				p.fatalf("reply %q: %v", line, err)
			}
			if !bytes.HasSuffix(line, []byte("}\n")) || bytes.Count(line, []byte("\n")) != 1 {
				p.fatalf("reply is not one JSON line: %q", line)
			}
		case <-expire:
			p.fatalf("no reply within %s", timeout)
		}
		break
	}
	if c.reply.Nonce != nonce {
		p.fatalf("reply for nonce %q, want %q: %s", c.reply.Nonce, nonce, c.raw)
	}
	if c.reply.ExecutionCount != p.count {
		p.fatalf("execution_count %d, want %d: %s", c.reply.ExecutionCount, p.count, c.raw)
	}
	marker := session.Marker(nonce)
	for _, s := range []struct {
		name string
		st   *stream
		dst  *string
	}{{"stdout", p.stdout, &c.stdout}, {"stderr", p.stderr, &c.stderr}} {
		_, got, ok := s.st.until(markerTimeout, func(b []byte) int {
			if i := bytes.Index(b, marker); i >= 0 {
				return i + len(marker)
			}
			return -1
		})
		if !ok {
			p.fatalf("no marker on %s within %s; reply %s", s.name, markerTimeout, c.raw)
		}
		*s.dst = string(got[:len(got)-len(marker)])
	}
	return c
}

func (p *proc) run(code string) cellOut {
	p.t.Helper()
	return p.wait(p.send(code))
}

// ok runs a cell that must succeed.
func (p *proc) ok(code string) cellOut {
	p.t.Helper()
	c := p.run(code)
	if c.reply.Status != "ok" || c.reply.Error != nil {
		p.fatalf("cell %q failed: %s\nstdout %q\nstderr %q", code, c.raw, c.stdout, c.stderr)
	}
	return c
}

// waitOutput waits until the running cell has printed s on stdout.
func (p *proc) waitOutput(s string) {
	p.t.Helper()
	if _, _, ok := p.stdout.until(cellTimeout, func(b []byte) int {
		if bytes.Contains(b, []byte(s)) {
			return 0 // consume nothing
		}
		return -1
	}); !ok {
		p.fatalf("the cell did not print %q", s)
	}
}

func (p *proc) interrupt() {
	p.t.Helper()
	if err := syscall.Kill(-p.pid, syscall.SIGINT); err != nil {
		p.fatalf("SIGINT: %v", err)
	}
}

// interruptCell interrupts the running cell as the agent does: one
// SIGINT, repeated until the reply if the driver asks for it.
func (p *proc) interruptCell() {
	p.t.Helper()
	p.interrupt()
	p.repeating = p.intrEvery > 0
}

// close ends the input and returns the driver's exit code.
func (p *proc) close() int {
	p.t.Helper()
	p.cmdW.Close()
	select {
	case <-p.exited:
	case <-time.After(exitTimeout):
		p.fatalf("still running %s after end of input", exitTimeout)
	}
	return p.state.ExitCode()
}

// textResults returns the text/plain of each result.
func textResults(c cellOut) []string {
	var out []string
	for _, r := range c.Results() {
		out = append(out, r["text/plain"])
	}
	return out
}

func (c cellOut) Results() []map[string]string { return c.reply.Results }

func (c cellOut) trace() string {
	if c.reply.Error == nil {
		return ""
	}
	return strings.Join(c.reply.Error.Traceback, "\n")
}

// startHost starts a driver on the host, with its files in a temp dir and
// a temp work dir.
func startHost(t testing.TB, lang string) *proc {
	t.Helper()
	d, ok := session.For(lang)
	if !ok {
		t.Fatalf("no driver for %s", lang)
	}
	if _, err := exec.LookPath(d.Argv[0]); err != nil {
		t.Fatalf("%s is needed on the host for the %s driver's tests: %v", d.Argv[0], lang, err)
	}
	dir := t.TempDir()
	for _, f := range d.Files {
		if err := os.WriteFile(filepath.Join(dir, f.Path), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return start(t, d, startOpts{driverDir: dir, workDir: t.TempDir(), env: os.Environ()})
}

// --- the protocol, for every language ---------------------------------------

// protocolCase is one language's cells for the checks every driver passes.
type protocolCase struct {
	// state: three cells that build on each other; the third prints stateOut.
	state    [3]string
	stateOut string
	// display shows displayWant as its text/plain result and prints nothing;
	// empty for a language without results.
	display, displayWant string
	// fail fails with failName; its traceback shows failTrace and none of
	// the driver's own frames.
	fail      string
	failName  string
	failTrace []string
	// busy cells print "started\n" and then run until interrupted.
	busy     []string
	intrName string
	// lost prints "started\n", then takes the state CPython is in when a
	// SIGINT lands just before a blocking call (its handler pending, the
	// call asleep) and keeps SIGINT from waking it; the driver's nudge
	// must end it. Empty: not checked.
	lost string
	// exact prints exactly exactOut and exactErr.
	exact, exactOut, exactErr string
	// fds prints `ls -l /proc/self/fd` of a child process of the cell,
	// which must not show the command or reply pipe; empty: not checked.
	fds string
	// driverFile is the driver's file name, which tracebacks must not show.
	driverFile string
	// comment starts a line comment.
	comment string
}

func testProtocol(t *testing.T, p *proc, pc protocolCase) {
	// One driver for all: a failed step ends the sequence.
	steps := []struct {
		name string
		f    func(t *testing.T)
	}{{"state", func(t *testing.T) {
		p.t = t
		for i, code := range pc.state {
			c := p.ok(code)
			if i < 2 && len(c.Results()) > 0 {
				p.fatalf("cell %q: unexpected results %s", code, c.raw)
			}
			if i == 0 && (c.stdout != "" || c.stderr != "") {
				// Also: the driver's start-up printed nothing.
				p.fatalf("cell %q printed %q, %q", code, c.stdout, c.stderr)
			}
			if i == 2 && c.stdout != pc.stateOut {
				p.fatalf("cell %q printed %q, want %q", code, c.stdout, pc.stateOut)
			}
		}
	}}, {"display", func(t *testing.T) {
		p.t = t
		c := p.ok(pc.display)
		if diff := cmp.Diff([]map[string]string{{"text/plain": pc.displayWant}}, c.Results()); diff != "" {
			p.fatalf("results (-want +got):\n%s", diff)
		}
		if c.stdout != "" {
			p.fatalf("the displayed value was printed too: %q", c.stdout)
		}
	}}, {"error", func(t *testing.T) {
		p.t = t
		c := p.run(pc.fail)
		if c.reply.Status != "error" || c.reply.Error == nil || c.reply.Error.Name != pc.failName {
			p.fatalf("want an error %s, got %s", pc.failName, c.raw)
		}
		tb := c.trace()
		for _, want := range pc.failTrace {
			if !strings.Contains(tb, want) {
				p.fatalf("traceback lacks %q:\n%s", want, tb)
			}
		}
		for _, bad := range []string{pc.driverFile, session.Dir} {
			if strings.Contains(tb, bad) {
				p.fatalf("traceback shows the driver (%q):\n%s", bad, tb)
			}
		}
	}}, {"interrupt", func(t *testing.T) {
		p.t = t
		for _, code := range pc.busy {
			nonce := p.send(code)
			p.waitOutput("started\n")
			p.interruptCell()
			t.Logf("SIGINT sent to the cell %q", code)
			c := p.waitWithin(nonce, interruptTimeout)
			if c.reply.Status != "error" || c.reply.Error == nil || c.reply.Error.Name != pc.intrName {
				p.fatalf("cell %q: want an error %s, got %s", code, pc.intrName, c.raw)
			}
			if c.stdout != "started\n" {
				p.fatalf("cell %q printed %q", code, c.stdout)
			}
			if c := p.ok(pc.state[2]); c.stdout != pc.stateOut {
				p.fatalf("after the interrupt the state cell printed %q, want %q", c.stdout, pc.stateOut)
			}
		}
	}}, {"lost_sigint", func(t *testing.T) {
		p.t = t
		nonce := p.send(pc.lost)
		p.waitOutput("started\n")
		p.interruptCell()
		c := p.waitWithin(nonce, interruptTimeout)
		if c.reply.Status != "error" || c.reply.Error == nil || c.reply.Error.Name != pc.intrName {
			p.fatalf("want an error %s, got %s", pc.intrName, c.raw)
		}
		// The cell left SIGINT blocked: the driver unblocks it, so the
		// next cell is interrupted as usual.
		nonce = p.send(pc.busy[1])
		p.waitOutput("started\n")
		p.interruptCell()
		if c := p.waitWithin(nonce, interruptTimeout); c.reply.Error == nil || c.reply.Error.Name != pc.intrName {
			p.fatalf("the cell after: want an error %s, got %s", pc.intrName, c.raw)
		}
		if c := p.ok(pc.state[2]); c.stdout != pc.stateOut {
			p.fatalf("the state cell printed %q, want %q", c.stdout, pc.stateOut)
		}
	}}, {"idle_sigint", func(t *testing.T) {
		p.t = t
		// Right after a reply, with or without time to handle it before
		// the next command: the next cell must run as usual.
		for i := range 5 {
			for range i % 3 {
				p.interrupt()
			}
			p.interrupt()
			if c := p.ok(pc.state[2]); c.stdout != pc.stateOut {
				p.fatalf("after SIGINT between cells the state cell printed %q, want %q", c.stdout, pc.stateOut)
			}
		}
	}}, {"exact_output", func(t *testing.T) {
		p.t = t
		for range 2 { // also: nothing of the first run spills into the second
			c := p.run(pc.exact)
			if c.stdout != pc.exactOut || c.stderr != pc.exactErr {
				p.fatalf("stdout %q, stderr %q; want %q, %q (reply %s)", c.stdout, c.stderr, pc.exactOut, pc.exactErr, c.raw)
			}
		}
	}}, {"big_cell", func(t *testing.T) {
		p.t = t
		// 300 KB of code (multi-byte characters, so bytes and characters
		// differ), read exactly: the command after it is intact.
		line := pc.comment + " " + strings.Repeat("\u00e9\u4e2d", 25) + "\n"
		code := strings.Repeat(line, 300<<10/len(line)) + pc.state[2]
		for range 2 {
			if c := p.ok(code); c.stdout != pc.stateOut {
				p.fatalf("the big cell printed %q, want %q", c.stdout, pc.stateOut)
			}
		}
	}}, {"fds", func(t *testing.T) {
		p.t = t
		c := p.ok(pc.fds)
		if !strings.Contains(c.stdout, " 0 -> ") {
			p.fatalf("no fd listing: %q", c.stdout)
		}
		for _, pipe := range p.pipes {
			if strings.Contains(c.stdout, pipe) {
				p.fatalf("a child process has a protocol pipe (%s):\n%s", pipe, c.stdout)
			}
		}
	}}, {"eof", func(t *testing.T) {
		p.t = t
		if code := p.close(); code != 0 {
			p.fatalf("exit code %d at end of input, want 0", code)
		}
	}}}
	// A language has no such step when its case leaves the field empty: no
	// displayed values (bash), no signal handler that a blocking call can
	// leave pending (only CPython's is nudged), no way to keep its protocol
	// fds from child processes (R).
	absent := map[string]bool{"display": pc.display == "", "lost_sigint": pc.lost == "", "fds": pc.fds == ""}
	for _, step := range steps {
		if absent[step.name] {
			continue
		}
		if !t.Run(step.name, step.f) {
			return
		}
	}
}

func pythonProtocol() protocolCase {
	return protocolCase{
		state:    [3]string{"x = 1", "x += 1\ndef f():\n    return x * 10", "print(f())"},
		stateOut: "20\n",
		display:  "[x, 'two', {'k': None}]", displayWant: "[2, 'two', {'k': None}]",
		fail:      "def g():\n    return 1 / 0\n\ng()",
		failName:  "ZeroDivisionError",
		failTrace: []string{"File \"<cell ", "line 4, in <module>", "in g\n", "    return 1 / 0", "ZeroDivisionError: division by zero"},
		busy: []string{
			"print('started')\nwhile True:\n    pass",
			"import time\nprint('started')\ntime.sleep(30)",
			"import subprocess\nprint('started')\nsubprocess.run(['sleep', '30'])",
		},
		intrName: "KeyboardInterrupt",
		// interrupt_main from another thread trips the SIGINT handler
		// without waking the main thread, as a SIGINT landing between
		// CPython's last check and the sleep does.
		lost: "import signal, threading, _thread, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n" +
			"print('started')\nthreading.Timer(0.1, _thread.interrupt_main).start()\ntime.sleep(30)",
		exact: "import os, sys\nprint('out')\nsys.stderr.write('err\\n')\nos.system('echo sub; echo suberr >&2')\n" +
			"sys.stdout.write('no newline \u00e9')",
		exactOut:   "out\nsub\nno newline \u00e9",
		exactErr:   "err\nsuberr\n",
		fds:        "import os\nos.system('ls -l /proc/self/fd')",
		driverFile: "python.py",
		comment:    "#",
	}
}

func javascriptProtocol() protocolCase {
	return protocolCase{
		state:    [3]string{"let x = 1", "void (x += 1);\nfunction f() { return x * 10 }", "console.log(f())"},
		stateOut: "20\n",
		display:  "({a: [x, 'two'], b: undefined})", displayWant: "{ a: [ 2, 'two' ], b: undefined }",
		fail:      "function g() {\n  throw new TypeError('bad')\n}\ng()",
		failName:  "TypeError",
		failTrace: []string{"TypeError: bad", "at g (cell-", ":2:9)"},
		busy: []string{
			"console.log('started'); while (true) {}",
			"await null; console.log('started'); await new Promise((r) => setTimeout(r, 30000))",
			"function spin() { for (;;) {} }\nconsole.log('started'); spin()",
		},
		intrName: "Interrupted",
		exact: "console.log('out'); console.error('err');\n" +
			"require('child_process').execSync('echo sub; echo suberr >&2', {stdio: 'inherit'});\n" +
			"process.stdout.write('no newline \u00e9')",
		exactOut:   "out\nsub\nno newline \u00e9",
		exactErr:   "err\nsuberr\n",
		fds:        "require('child_process').execSync('ls -l /proc/self/fd', {stdio: 'inherit'})",
		driverFile: "javascript.js",
		comment:    "//",
	}
}

func bashProtocol() protocolCase {
	return protocolCase{
		state:     [3]string{"x=1", "x=$((x + 1)); f() { echo $((x * 10)); }; cd /tmp", "f; pwd"},
		stateOut:  "20\n/tmp\n",
		fail:      "echo before; false",
		failName:  "ExitStatus",
		failTrace: nil,
		busy: []string{
			"echo started; while :; do :; done",
			"echo started; sleep 30",
			"spin() { while :; do :; done; }; echo started; spin; echo not reached",
			"echo started; sleep 30 & wait",
			// A program that survives the first SIGINT, as one that
			// catches Ctrl-C does (and as a command forked just after
			// the SIGINT came does): the driver repeats it.
			"bash -c 'trap \"trap - INT\" INT; echo started; while :; do sleep 0.1; done'",
		},
		intrName: "Interrupted",
		// The code's bytes reach the shell exactly: tabs, backslashes,
		// leading and trailing blanks, UTF-8, no final newline.
		exact:      "printf '%s|' \"$(printf 'a\\tb')\" '  lead' 'trail  ' 'back\\slash' '\u00e9'; echo err >&2; sh -c 'echo sub'  ",
		exactOut:   "a\tb|  lead|trail  |back\\slash|\u00e9|sub\n",
		exactErr:   "err\n",
		fds:        "ls -l /proc/self/fd",
		driverFile: "bash.sh",
		comment:    "#",
	}
}

func rProtocol() protocolCase {
	return protocolCase{
		state:    [3]string{"x <- 1", "x <- x + 1\nf <- function() x * 10", "cat(f(), \"\\n\", sep = \"\")"},
		stateOut: "20\n",
		display:  "c(x, 3)", displayWant: "[1] 2 3",
		fail:      "g <- function(v) stop(\"bad \", v)\nh <- function() g(1)\nh()",
		failName:  "simpleError",
		failTrace: []string{"h()", "g(1)", "Error in g(1) : bad 1"},
		busy: []string{
			"cat(\"started\\n\"); while (TRUE) {}",
			"cat(\"started\\n\"); Sys.sleep(30)",
			"cat(\"started\\n\"); repeat { x <- x + 0 }",
		},
		intrName:   "interrupt",
		exact:      "cat(\"out\\n\"); message(\"err\"); system(\"echo sub; echo suberr >&2\"); cat(\"no newline \u00e9\")",
		exactOut:   "out\nsub\nno newline \u00e9",
		exactErr:   "err\nsuberr\n",
		driverFile: "r.R",
		comment:    "#",
	}
}

// --- host tests -----------------------------------------------------------

func TestPython(t *testing.T) {
	t.Parallel()
	p := startHost(t, "python")
	t.Run("protocol", func(t *testing.T) { testProtocol(t, p, pythonProtocol()) })
	t.Run("ipython", func(t *testing.T) { testPythonCells(t, startHost(t, "python")) })
	// Plots need pandas, matplotlib and plotly, which the host's python3
	// does not have: TestImages/python runs testPythonPlots in the image.
}

func TestJavaScript(t *testing.T) {
	t.Parallel()
	p := startHost(t, "javascript")
	t.Run("protocol", func(t *testing.T) { testProtocol(t, p, javascriptProtocol()) })
	t.Run("repl", func(t *testing.T) { testJavaScriptCells(t, startHost(t, "javascript")) })
}

func TestBash(t *testing.T) {
	t.Parallel()
	p := startHost(t, "bash")
	t.Run("protocol", func(t *testing.T) { testProtocol(t, p, bashProtocol()) })
	t.Run("shell", func(t *testing.T) { testBashCells(t, startHost(t, "bash")) })
}

// --- language checks --------------------------------------------------------

func wantError(p *proc, c cellOut, name, value string) {
	p.t.Helper()
	if c.reply.Status != "error" || c.reply.Error == nil || c.reply.Error.Name != name ||
		(value != "" && c.reply.Error.Value != value) {
		p.fatalf("want error %s %q, got %s", name, value, c.raw)
	}
}

func wantResults(p *proc, c cellOut, want []map[string]string) {
	p.t.Helper()
	if diff := cmp.Diff(want, c.Results()); diff != "" {
		p.fatalf("results (-want +got):\n%s", diff)
	}
}

func testPythonCells(t *testing.T, p *proc) {
	p.t = t
	b64 := base64.StdEncoding.EncodeToString
	c := p.ok(`
class Rich:
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_png_(self): return b"\x89PNG fake"
    def _repr_markdown_(self): return None  # None: not shown
    def __repr__(self): return "Rich()"

class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": "**md**", "application/json": {"a": 1}}
    def __repr__(self): return "Bundle()"

print("before")
display(Rich())
display(1, "two")
Bundle()`)
	wantResults(p, c, []map[string]string{
		{"text/html": "<b>rich</b>", "image/png": b64([]byte("\x89PNG fake")), "text/plain": "Rich()"},
		{"text/plain": "1"},
		{"text/plain": "'two'"},
		{"text/markdown": "**md**", "application/json": `{"a": 1}`, "text/plain": "Bundle()"},
	})
	if c.stdout != "before\n" {
		p.fatalf("stdout %q", c.stdout)
	}
	// A class's _repr_*_ are functions, not to be called.
	wantResults(p, p.ok("Rich"), []map[string]string{{"text/plain": "<class '__main__.Rich'>"}})
	for _, code := range []string{"None", "y = 5", "y;", "y  ; # quiet", "def h(): pass", "if True:\n    y"} {
		if c := p.ok(code); len(c.Results()) > 0 {
			p.fatalf("cell %q: want no results, got %s", code, c.raw)
		}
	}
	if c := p.ok("y; y"); !slices.Equal(textResults(c), []string{"5"}) {
		p.fatalf("'y; y' shows %s", c.raw)
	}
	if c := p.ok("if __name__ == '__main__':\n    print('main')"); c.stdout != "main\n" {
		p.fatalf("__name__: %q", c.stdout)
	}
	// Classes of the cells pickle (they live in __main__).
	if c := p.ok("import pickle\nclass P: pass\ntype(pickle.loads(pickle.dumps(P()))).__name__"); !slices.Equal(textResults(c), []string{"'P'"}) {
		p.fatalf("pickle: %s", c.raw)
	}
	// Modules in the work dir import; the driver's own dir is not on the path.
	wd := p.ok("import os\nprint(os.getcwd())").stdout
	if err := os.WriteFile(filepath.Join(strings.TrimSpace(wd), "mod_in_work.py"), []byte("VALUE = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := p.ok("import mod_in_work\nmod_in_work.VALUE"); !slices.Equal(textResults(c), []string{"42"}) {
		p.fatalf("import from the work dir: %s", c.raw)
	}
	wantError(p, p.run("import python"), "ModuleNotFoundError", "")
	// The driver's names stay out of the namespace.
	if c := p.ok("sorted(k for k in globals() if not k.startswith('__'))"); strings.Contains(c.raw, "_ns") || strings.Contains(c.raw, "_running") {
		p.fatalf("driver names in globals(): %s", c.raw)
	}
	c = p.run("import sys\nprint('bye')\nsys.exit(3)")
	wantError(p, c, "SystemExit", "3")
	if c.stdout != "bye\n" {
		p.fatalf("stdout %q", c.stdout)
	}
	wantError(p, p.run("exit()"), "SystemExit", "None")
	c = p.run("x = (")
	wantError(p, c, "SyntaxError", "")
	if tb := c.trace(); !strings.Contains(tb, "<cell ") || !strings.Contains(tb, "x = (") || strings.Contains(tb, "python.py") {
		p.fatalf("syntax error traceback:\n%s", tb)
	}
	if c := p.ok("import asyncio\nawait asyncio.sleep(0)\n40 + 2"); !slices.Equal(textResults(c), []string{"42"}) {
		p.fatalf("top-level await: %s", c.raw)
	}
	if c := p.ok("from __future__ import annotations"); c.reply.Status != "ok" {
		p.fatalf("future import: %s", c.raw)
	}
	if c := p.ok("def k(a: Undefined): pass\nk.__annotations__['a']"); !slices.Equal(textResults(c), []string{"'Undefined'"}) {
		p.fatalf("__future__ flags carry over: %s", c.raw)
	}
	// An exception that cannot be printed is still an error reply.
	wantError(p, p.run("class E(Exception):\n    def __str__(self): raise ValueError\nraise E()"), "E", "<exception str() failed>")
	// An exception of a __repr__ is the cell's error.
	wantError(p, p.run("class Bad:\n    def __repr__(self): raise ValueError('no repr')\nBad()"), "ValueError", "no repr")
	// A child the cell forks does not come back to the driver's loop.
	if c := p.ok("import os\npid = os.fork()\nif pid == 0:\n    print('child')\nelse:\n    os.waitpid(pid, 0)\n    print('parent')"); c.stdout != "child\nparent\n" {
		p.fatalf("fork: %q", c.stdout)
	}
	// A cell that takes SIGINT away gets it back for the next cells.
	p.ok("import signal\nsignal.signal(signal.SIGINT, signal.SIG_DFL)")
	p.interrupt()
	nonce := p.send("print('started')\nimport time\ntime.sleep(30)")
	p.waitOutput("started\n")
	// As the agent interrupts a cell: a SIGINT, then the driver's nudge
	// until the reply (a lone SIGINT can land between CPython's last
	// check for signals and the sleep, and be lost).
	p.interruptCell()
	wantError(p, p.waitWithin(nonce, interruptTimeout), "KeyboardInterrupt", "")
	// Start-up stays light: nothing heavy is imported before a cell asks.
	if c := p.ok("import sys\nsorted(m for m in ('numpy', 'matplotlib', 'pandas', 'asyncio') if m in sys.modules)"); !slices.Equal(textResults(c), []string{"['asyncio']"}) {
		p.fatalf("modules loaded: %s", c.raw)
	}
	if code := p.close(); code != 0 {
		p.fatalf("exit code %d", code)
	}
}

func isPNG(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) && len(b) > 1000
}

// wantPlots checks that c's results are, in order, images (png) and html
// pages (html), with text/plain beside them.
func wantPlots(p *proc, c cellOut, kinds ...string) {
	p.t.Helper()
	if len(c.Results()) != len(kinds) {
		p.fatalf("want %d results %v, got %d: %.500s", len(kinds), kinds, len(c.Results()), c.raw)
	}
	for i, kind := range kinds {
		r := c.Results()[i]
		switch kind {
		case "png":
			if !isPNG(r["image/png"]) {
				p.fatalf("result %d is not a PNG: %.300v", i, r)
			}
		case "html":
			if h := r["text/html"]; !strings.Contains(h, "<html") || !strings.Contains(h, "plotly") {
				p.fatalf("result %d is not a plotly page: %.300v", i, r)
			}
		}
	}
}

func testPythonPlots(t *testing.T, p *proc) {
	p.t = t
	c := p.ok("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('after show')")
	wantPlots(p, c, "png")
	if c.stdout != "after show\n" || c.stderr != "" {
		p.fatalf("stdout %q stderr %q", c.stdout, c.stderr)
	}
	// Open at the end of the cell: shown and closed.
	wantPlots(p, p.ok("plt.figure()\nplt.plot([3, 2, 1])\nplt.figure()\nplt.bar([1], [2]);"), "png", "png")
	if c := p.ok("len(plt.get_fignums())"); !slices.Equal(textResults(c), []string{"0"}) {
		p.fatalf("figures left open: %s", c.raw)
	}
	// A figure as the value is shown once.
	wantPlots(p, p.ok("fig, ax = plt.subplots()\nax.plot([1, 2])\nfig"), "png")
	c = p.ok("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
	if len(c.Results()) != 1 || !strings.Contains(c.Results()[0]["text/html"], "<table") ||
		!strings.Contains(c.Results()[0]["text/plain"], "a  b") {
		p.fatalf("DataFrame: %.500s", c.raw)
	}
	wantPlots(p, p.ok("import plotly.graph_objects as go\nfig = go.Figure(go.Bar(y=[1, 2]))\nfig.show()"), "html")
	wantPlots(p, p.ok("fig"), "html")
	// seaborn draws through pyplot, patched when seaborn imports it.
	wantPlots(p, p.ok("import seaborn as sns\nsns.histplot([1, 2, 2, 3]);"), "png")
}

func testJavaScriptCells(t *testing.T, p *proc) {
	p.t = t
	text := func(code string, want ...string) {
		p.t.Helper()
		if c := p.ok(code); !slices.Equal(textResults(c), want) {
			p.fatalf("cell %q: want %q, got %s", code, want, c.raw)
		}
	}
	// let, const and class may be declared again, as in a console.
	text("const a = 1; let b = 2; class K {}; a + b", "3")
	text("const a = 10; let b = 20; class K { v() { return a + b } }; new K().v()", "30")
	text("var v = 1; function fn() { return v + 1 }")
	text("fn()", "2")
	text("'str'", "'str'")
	text("Promise.resolve(42)", "42")
	text("await new Promise((r) => setTimeout(() => r('done'), 10))", "'done'")
	text("const path = require('path'); path.join('a', 'b')", "'a/b'")
	text("undefined")
	text("null", "null")
	text("if (true) { 7 }", "7")
	c := p.run("let = ;")
	wantError(p, c, "SyntaxError", "")
	if tb := c.trace(); !strings.Contains(tb, "at cell-") || strings.Contains(tb, "javascript.js") || strings.Contains(tb, "node:inspector") {
		p.fatalf("syntax error traceback:\n%s", tb)
	}
	wantError(p, p.run("throw 5"), "Uncaught", "5")
	wantError(p, p.run("throw { get stack() { throw 1 }, [Symbol.for('nodejs.util.inspect.custom')]() { throw 2 } }"), "Error", "")
	wantError(p, p.run("Promise.reject(new RangeError('nope'))"), "RangeError", "nope")
	wantError(p, p.run("await Promise.reject(new Error('awaited'))"), "Error", "awaited")
	// Left behind: an unhandled rejection and an exception in a timer do
	// not end the session.
	text("Promise.reject(new Error('later')); setTimeout(() => { throw new Error('in timer') }, 0); 1", "1")
	if c := p.ok("await new Promise((r) => setTimeout(r, 50)); 2"); !slices.Equal(textResults(c), []string{"2"}) ||
		!strings.Contains(c.stderr, "in timer") {
		p.fatalf("after left-behind errors: %s stderr %q", c.raw, c.stderr)
	}
	// A process.exit is the user's choice: the session ends, at once.
	p.send("process.exit(3)")
	select {
	case <-p.exited:
	case <-time.After(exitTimeout):
		p.fatalf("process.exit did not end the driver")
	}
}

func testBashCells(t *testing.T, p *proc) {
	p.t = t
	out := func(code, want string) {
		p.t.Helper()
		if c := p.ok(code); c.stdout != want {
			p.fatalf("cell %q printed %q, want %q", code, c.stdout, want)
		}
	}
	out("declare -A m=([k]=v); export FOO=bar; alias ll='echo aliased'", "")
	out("echo ${m[k]}; sh -c 'echo $FOO'", "v\nbar\n")
	c := p.run("echo a; return 3; echo b")
	wantError(p, c, "ExitStatus", "3")
	if c.stdout != "a\n" {
		p.fatalf("return: %q", c.stdout)
	}
	// set -e aborts the cell, not the session, and stays on.
	c = p.run("set -e; echo a; false; echo b")
	wantError(p, c, "ExitStatus", "1")
	if c.stdout != "a\n" {
		p.fatalf("set -e: %q", c.stdout)
	}
	c = p.run("g() { echo in; false; echo not; }; g; echo not")
	wantError(p, c, "ExitStatus", "1")
	if c.stdout != "in\n" {
		p.fatalf("set -e in a function: %q", c.stdout)
	}
	// errexit-exempt, the cell's status is 1, and that is the cell's error.
	wantError(p, p.run("[[ a == b ]] && echo no"), "ExitStatus", "1")
	out("set +e; false; echo e", "e\n")
	out("( set -e; false; echo not ); echo subshell $?", "subshell 1\n")
	// set -x traces the cell's commands only (a level deeper than in a
	// script: the cell is sourced).
	for _, cell := range []struct{ code, trace string }{
		{"set -x; echo hi", "++ echo hi\n"}, {"echo yo", "++ echo yo\n"}, {"set +x", "++ set +x\n"}, {"echo off", ""},
	} {
		if c := p.ok(cell.code); c.stderr != cell.trace {
			p.fatalf("set -x: cell %q: stderr %q, want %q", cell.code, c.stderr, cell.trace)
		}
	}
	// Shell options and IFS the cells leave do not upset the driver.
	out("set -u -o pipefail; IFS=,; shopt -s failglob nullglob extglob; echo ${unset_var-default}", "default\n")
	out("echo still; v=a,b; echo $v", "still\na b\n")
	out("set +u +o pipefail; IFS=$' \\t\\n'; shopt -u failglob nullglob extglob", "")
	out("cat; echo stdin is empty", "stdin is empty\n")
	out("echo \"$0\"", "bash\n")
	wantError(p, p.run("nosuchcommand"), "ExitStatus", "127")
	wantError(p, p.run("if then"), "ExitStatus", "2")
	if code := p.close(); code != 0 {
		p.fatalf("exit code %d", code)
	}
}

func testRCells(t *testing.T, p *proc) {
	p.t = t
	c := p.ok("1\ninvisible(2)\n\"three\"")
	if c.stdout != "[1] 1\n" || !slices.Equal(textResults(c), []string{"[1] \"three\""}) {
		p.fatalf("visible values: stdout %q, %s", c.stdout, c.raw)
	}
	for _, code := range []string{"y <- 3", "invisible(y)", "f <- function() NULL"} {
		if c := p.ok(code); len(c.Results()) > 0 || c.stdout != "" {
			p.fatalf("cell %q: want nothing, got %s stdout %q", code, c.raw, c.stdout)
		}
	}
	// JSON escaping: quotes, backslashes, control characters, UTF-8.
	c = p.ok("print.weird <- function(x, ...) cat(\"q\\\"b\\\\s\\tt\", intToUtf8(1), \"c\\u00e9\\u4e2d\\n\", sep = \"\")\n" +
		"structure(1, class = \"weird\")")
	if diff := cmp.Diff([]string{"q\"b\\s\tt\x01c\u00e9\u4e2d"}, textResults(c)); diff != "" {
		p.fatalf("escaping (-want +got):\n%s", diff)
	}
	c = p.run("x <- (")
	wantError(p, c, "parseError", "")
	if !strings.Contains(c.reply.Error.Value, "<cell ") {
		p.fatalf("parse error: %s", c.raw)
	}
	wantError(p, p.run("stop(\"top\")"), "simpleError", "top")
	wantError(p, p.run("log(\"a\")"), "simpleError", "non-numeric argument to mathematical function")
	c = p.ok("warning(\"careful\"); 5")
	if !strings.Contains(c.stderr, "careful") || !slices.Equal(textResults(c), []string{"[1] 5"}) {
		p.fatalf("warning: stderr %q, %s", c.stderr, c.raw)
	}
	// The driver's names stay out of the global environment.
	if c := p.ok("ls(all.names = TRUE)"); strings.Contains(c.raw, "run_cell") || strings.Contains(c.raw, "cmd") {
		p.fatalf("driver names in .GlobalEnv: %s", c.raw)
	}
	wantPlots(p, p.ok("plot(1:10)"), "png")
	wantPlots(p, p.ok("plot(1:10)\nhist(c(1, 2, 2, 3))\ny"), "png", "png", "text")
	c = p.ok("library(ggplot2)\nggplot(data.frame(a = 1:3, b = 1:3), aes(a, b)) + geom_point()")
	wantPlots(p, c, "png")
	if _, ok := c.Results()[0]["text/plain"]; ok {
		p.fatalf("a ggplot shows as text too: %.300s", c.raw)
	}
	if c := p.ok("p <- ggplot(data.frame(a = 1:3), aes(a)) + geom_bar()\nprint(p)\ninvisible(NULL)"); len(c.Results()) != 1 {
		p.fatalf("printed ggplot: %.300s", c.raw)
	}
	if c := p.ok("length(dev.list())"); !slices.Equal(textResults(c), []string{"[1] 0"}) {
		p.fatalf("devices left open: %s", c.raw)
	}
	// quit() is the user's choice: the session ends, at once.
	p.send("quit(status = 4)")
	select {
	case <-p.exited:
	case <-time.After(exitTimeout):
		p.fatalf("quit() did not end the driver")
	}
	if code := p.state.ExitCode(); code != 4 {
		p.fatalf("exit code %d after quit(status = 4)", code)
	}
}

// --- in the images ----------------------------------------------------------

// TestImages runs TestInImage in each language's image, as the agent runs
// a driver there: as root writing the driver files, the driver as the job
// uid with root's pipes, on a read-only rootfs with tmpfs /tmp and /work.
// Docker and the images (make images) must be there.
func TestImages(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Fatalf("Docker is needed for the drivers' tests in the images: %v: %s", err, out)
	}
	bin := staticTestBinary(t)
	for _, tc := range []struct {
		name, lang string
		chown      bool
	}{
		{"python", "python", false},
		{"javascript", "javascript", false},
		{"javascript_chown", "javascript", true},
		{"r", "r", false},
		{"r_chown", "r", true},
		{"bash", "bash", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			image := "sandq/" + tc.lang + ":latest"
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			chown := "0"
			if tc.chown {
				chown = "1"
			}
			name := "sandq-test-session-" + strings.ReplaceAll(tc.name, "_", "-") + "-" + strings.ToLower(newNonce()[:8])
			t.Cleanup(func() {
				// The container outlives a killed docker CLI; gone already is fine.
				_ = exec.Command("docker", "rm", "-f", name).Run()
			})
			cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--name", name, "--network", "none", "--read-only",
				"--label", "sandq.test=langs-session",
				"--tmpfs", "/tmp:rw,exec,mode=1777", "--tmpfs", fmt.Sprintf("/work:rw,exec,uid=%d,gid=%d,mode=0755", jobUID, jobUID),
				"--user", "0:0", "-v", bin+":/sandq/session.test:ro", "--entrypoint", "/sandq/session.test",
				"-e", inImageEnv+"="+tc.lang, "-e", chownEnv+"="+chown,
				image, "-test.run", "^TestInImage$", "-test.v", "-test.count=1", "-test.timeout=2m")
			begin := time.Now()
			out, err := cmd.CombinedOutput()
			t.Logf("in %s (%s):\n%s", image, time.Since(begin).Round(time.Millisecond), out)
			if err != nil {
				t.Fatalf("TestInImage in %s: %v", image, err)
			}
			if !bytes.Contains(out, []byte("--- PASS: TestInImage")) {
				t.Fatalf("TestInImage did not run in %s", image)
			}
		})
	}
}

// staticTestBinary returns this test binary if it is statically linked, or
// builds one that is.
func staticTestBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	static := true
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			static = false
		}
	}
	f.Close()
	if static {
		return self
	}
	bin := filepath.Join(t.TempDir(), "session.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static test binary: %v\n%s", err, out)
	}
	return bin
}

// TestInImage is run by TestImages inside an image; elsewhere it does
// nothing.
func TestInImage(t *testing.T) {
	lang := os.Getenv(inImageEnv)
	if lang == "" {
		return
	}
	d, ok := session.For(lang)
	if !ok {
		t.Fatalf("no driver for %q", lang)
	}
	// As the agent: root writes the files, read-only to the job.
	if err := os.MkdirAll(session.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range d.Files {
		if err := os.WriteFile(filepath.Join(session.Dir, f.Path), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDQ_SESSION_TEST_") {
			env = append(env, kv)
		}
	}
	chown := os.Getenv(chownEnv) == "1"
	o := startOpts{workDir: "/work", env: env, chown: chown, cred: &syscall.Credential{Uid: jobUID, Gid: jobUID}}
	startIn := func(t *testing.T) *proc { return start(t, d, o) }
	switch lang {
	case "python":
		p := startIn(t)
		t.Run("protocol", func(t *testing.T) { testProtocol(t, p, pythonProtocol()) })
		t.Run("ipython", func(t *testing.T) { testPythonCells(t, startIn(t)) })
		t.Run("plots", func(t *testing.T) { testPythonPlots(t, startIn(t)) })
	case "javascript":
		pc := javascriptProtocol()
		if !chown {
			pc.fds = "" // the pipes are root's: node cannot reopen them close-on-exec
		}
		p := startIn(t)
		t.Run("protocol", func(t *testing.T) { testProtocol(t, p, pc) })
		t.Run("repl", func(t *testing.T) { testJavaScriptCells(t, startIn(t)) })
	case "r":
		p := startIn(t)
		// Without the pipes, the driver reads and writes them through two
		// cat relays.
		relays := "0\n"
		if !chown {
			relays = "2\n"
		}
		if c := p.ok(`cat(sum(vapply(list.files("/proc", "^[0-9]+$", full.names = TRUE), function(d) ` +
			`identical(tryCatch(readLines(file.path(d, "cmdline"), warn = FALSE), error = function(e) ""), "cat"), NA)), "\n", sep = "")`); c.stdout != relays || c.stderr != "" {
			p.fatalf("cat relays: %q, want %q; stderr %q", c.stdout, relays, c.stderr)
		}
		t.Run("protocol", func(t *testing.T) { testProtocol(t, p, rProtocol()) })
		t.Run("console", func(t *testing.T) { testRCells(t, startIn(t)) })
	case "bash":
		p := startIn(t)
		t.Run("protocol", func(t *testing.T) { testProtocol(t, p, bashProtocol()) })
		t.Run("shell", func(t *testing.T) { testBashCells(t, startIn(t)) })
	default:
		t.Fatalf("no checks for %s", lang)
	}
}

// --- benchmarks ---------------------------------------------------------------

// BenchmarkCell measures a cell's round trip on the host, from writing the
// command to reading the reply and both markers.
func BenchmarkCell(b *testing.B) {
	for _, bc := range []struct{ lang, init, cell string }{
		{"python", "x = 0", "x += 1"},
		{"javascript", "let x = 0", "x += 1"},
		{"bash", "x=0", "x=$((x + 1))"},
	} {
		b.Run(bc.lang, func(b *testing.B) {
			p := startHost(b, bc.lang)
			p.ok(bc.init)
			var rtt time.Duration
			b.ResetTimer()
			for b.Loop() {
				rtt += p.ok(bc.cell).rtt
			}
			b.ReportMetric(float64(rtt.Microseconds())/float64(b.N), "µs-to-reply/op")
		})
	}
}

// BenchmarkStart measures a driver's start on the host, to its ready line.
func BenchmarkStart(b *testing.B) {
	for _, lang := range []string{"python", "javascript", "bash"} {
		b.Run(lang, func(b *testing.B) {
			for b.Loop() {
				p := startHost(b, lang)
				if code := p.close(); code != 0 {
					b.Fatalf("exit code %d", code)
				}
			}
		})
	}
}
