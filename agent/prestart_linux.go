//go:build linux

package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A prestart takes interpreter start-up off the job's path. For Python it
// takes it off the job's CPU too: a fork server. (Node.js and Ruby, which
// are not forked once started, are started on a FIFO:
// prestart_fifo_linux.go.)
// After the scrub that follows a run whose step asked for it
// (Step.Prestart), the agent starts that same step again, exactly as it
// would for the next job (same argv, env, rlimits, uid, session,
// streams), with one more descriptor, 3: a socket to the agent. CPython
// initializes (site, encodings, sys.path, start-up hooks) and opens its
// script with fopen; there the image's preloaded library (pyfork/pyfork.c)
// stops it and serves forks instead. After each scrub the agent has it fork
// the next run's process ahead of time (with CLONE_PARENT: that process is
// the agent's child, as after a cold start), which waits. When a run is that same step,
// the agent writes its files and sends the process the run's stdin, stdout
// and stderr; it returns from that fopen with the run's script, a regular
// file: from there on CPython runs exactly what a cold start runs. The
// forked process shares the server's memory copy-on-write, so a print(1)
// run costs ~4 ms of CPU (~3 of them copying pages as CPython tears down at
// exit) where a cold start costs ~11.
//
// Nothing of one job reaches the next: the server never runs anyone's code
// after its own start-up, which happens after a scrub; each fork is used
// for one run only; and the server refuses to fork (and exits) once
// anything a job could change about it has changed (pyfork.c). A run that
// leaves any process behind loses the server with the rest (killOthers).
//
// What differs from a cold start, and cannot be helped: str hashes (the
// hash seed is the server's, so two runs in one container share it, where
// two cold starts would not), the address-space layout, a process count one
// higher (the server, visible in /proc), the CPU time of start-up (not the
// run's), and the fork server's few MB in the container's memory.
//
// It is used only when the outcome cannot differ otherwise: the run is that
// one step with the same argv, env and rlimits, no libraries and no egress;
// its stdin is the run's either way (the server started on /dev/null and
// never read it; the fork gets the run's pipe as fd 0, as a cold start
// does, before CPython's sys.stdin reads a byte; a Node.js FIFO start runs
// only without stdin, its process having started on its own); the script
// sits in the work dir itself (not in a subdirectory) and is not a zip
// archive (CPython decides at start-up whether its script is a zip
// application, and the server decided on an empty file). Anything else
// stops the server and starts cold.
type prestart struct {
	kind   prestartKind
	step   Step   // as asked, Stdin nil
	script string // the script's path in the work dir
	pid    int
	exited <-chan exitInfo
	ctl    int       // our end of the control socket; -1 for a fifoStart
	inodes []uint64  // the control socket's two ends (scrub: not the job's)
	proc   *stepProc // the server's own streams, until it is ready; a fifoStart's, the run's
	source []byte    // a fifoStart's script, once its run has taken it
	lead   []byte    // a fifoStart's first bytes of the script, fed at its start (Ruby)
	feed   *os.File  // the FIFO's end the lead went through, kept to feed the rest
	ready  bool      // it answered ready; its placeholder is gone
	// forCase: started for a judged job's test cases (case_linux.go), on
	// the job's own script in its frozen work dir, not on a placeholder.
	forCase bool
	killed  bool    // killed, or seen dead: its PID is not to be signalled again
	next    *forked // the process forked for the next run, if any
}

// forked is a process the server forked ahead of a run: the agent's child,
// waiting on sock for the run's stdin, stdout and stderr.
type forked struct {
	pid    int
	exited <-chan exitInfo
	sock   int
	inodes []uint64
}

// pyforkMagic opens the control socket's first message (pyfork.c).
const pyforkMagic = "sandq-pyfork-1"

// Replies of the fork server (pyfork.c).
const (
	forkReady   = 1
	forkPID     = 2
	forkError   = 3
	forkTainted = 4
)

// prestartKind is how an interpreter is started ahead of its run.
type prestartKind int

const (
	noPrestart prestartKind = iota
	// forkServer: CPython stops in the fopen of its script and forks a
	// process per run (pyfork.c).
	forkServer
	// fifoStart: the interpreter starts on a FIFO where its script will
	// be, and blocks reading it; the run's script is fed through it
	// (prestart_fifo_linux.go). One process, for one run.
	fifoStart
)

// prestartScript returns the script a step runs, and how it is started
// ahead, when it is an interpreter the agent knows how to prestart:
// `python3 <file>.py [args...]` (a fork server), `node <file>.js [args...]`,
// `ruby <file>.rb [args...]` or the TypeScript compiler, `node
// --snapshot-blob TSCSnapshot <file>.ts` (FIFO starts), the file a plain
// name in the work dir.
func prestartScript(st Step) (string, prestartKind) {
	if !st.Prestart || len(st.Argv) < 2 {
		return "", noPrestart
	}
	var kind prestartKind
	var ext string
	script := st.Argv[1]
	switch st.Argv[0] {
	case "python3":
		kind, ext = forkServer, ".py"
	case "node":
		kind, ext = fifoStart, ".js"
		if len(st.Argv) == 4 && st.Argv[1] == "--snapshot-blob" && st.Argv[2] == TSCSnapshot {
			script, ext = st.Argv[3], ".ts"
		}
	case "ruby":
		kind, ext = fifoStart, ".rb"
	default:
		return "", noPrestart
	}
	if strings.HasPrefix(script, "-") || !strings.HasSuffix(script, ext) ||
		strings.ContainsRune(script, '/') || !filepath.IsLocal(script) {
		return "", noPrestart
	}
	return script, kind
}

// nextPrestart records the step to prestart after this run's scrub, or
// nothing when the run does not qualify.
func (s *Server) nextPrestart(run *RunRequest) {
	s.preStep, s.preLead = nil, nil
	if !prestartable(run) {
		return
	}
	st := run.Steps[0]
	script, kind := prestartScript(st)
	if kind == noPrestart || (kind == fifoStart && !fifoEnvFits(st.Argv[0], st.Env)) {
		return
	}
	if st.Argv[0] == "ruby" {
		// Ruby is fed the first bytes of this run's script at its start:
		// the next run fits if its script begins with the same.
		if s.preLead = rubyLead(runScript(run, script)); s.preLead == nil {
			return
		}
	}
	st.Stdin = nil
	s.preStep = &st
}

// prestartable reports whether a run's first step may be served by a
// process started ahead: one step (a compiler's started ahead may be
// followed by others: the program it built runs cold), no libraries, no
// egress, not a test case.
func prestartable(run *RunRequest) bool {
	if len(run.Steps) == 0 || run.Libs != nil || run.Egress != "" || run.Steps[0].FreshCase {
		return false
	}
	return len(run.Steps) == 1 || isTSC(run.Steps[0])
}

// isTSC reports whether st runs sandq-tsc.
func isTSC(st Step) bool {
	return len(st.Argv) > 2 && st.Argv[0] == "node" && st.Argv[1] == "--snapshot-blob" && st.Argv[2] == TSCSnapshot
}

// runScript returns the data of the run's file at script, nil if none.
func runScript(run *RunRequest, script string) []byte {
	for _, f := range run.Files {
		if filepath.Clean(f.Path) == script {
			return f.Data
		}
	}
	return nil
}

// alive reports whether the server has not exited.
func (pre *prestart) alive() bool {
	select {
	case <-pre.exited:
		pre.killed = true // reaped: the PID may be another's
		return false
	default:
		return !pre.killed
	}
}

// sameStep reports whether st would start exactly as the server did.
func (pre *prestart) sameStep(st Step) bool {
	return st.Prestart && slices.Equal(st.Argv, pre.step.Argv) &&
		slices.Equal(st.Env, pre.step.Env) && st.Rlimits == pre.step.Rlimits
}

// startPrestart starts a fork server for the recorded step after a clean
// scrub, unless the one running already is for that step. Failing leaves
// none: the next run starts cold.
func (s *Server) startPrestart() {
	if pre := s.pre; pre != nil {
		if s.preStep != nil && s.sess == nil && !pre.forCase && pre.ready && pre.alive() && pre.sameStep(*s.preStep) {
			if err := s.prefork(pre); err == nil {
				return
			}
		}
		s.dropPrestart()
	}
	if s.preStep == nil || s.sess != nil {
		return
	}
	st := *s.preStep
	script, kind := prestartScript(st)
	if kind == fifoStart {
		s.startFIFO(st, script, s.preLead)
		return
	}
	path := filepath.Join(s.cfg.WorkDir, script)
	// CPython's sys.path[0] is the directory of its script's real path: the
	// script must exist while the server starts. An empty file stands in.
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	syscall.Close(fd)
	if s.pre = s.startForkServer(st, script); s.pre == nil {
		_ = os.Remove(path)
	}
}

// startForkServer starts CPython as st would start, on the script at
// script in the work dir, as a fork server; nil if it cannot.
func (s *Server) startForkServer(st Step, script string) *prestart {
	path := filepath.Join(s.cfg.WorkDir, script)
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	hello := pyforkMagic + "\x00" + path + "\x00" + s.cfg.WorkDir + "\x00"
	if _, err := syscall.Write(sp[0], []byte(hello)); err != nil {
		syscall.Close(sp[0])
		syscall.Close(sp[1])
		return nil
	}
	p, err := s.prepareStep(st)
	if err != nil {
		syscall.Close(sp[0])
		syscall.Close(sp[1])
		return nil
	}
	inodes := sockInodes(sp[:])
	p.attr.Files = append(p.attr.Files, uintptr(sp[1]))
	pid, exited, err := s.reaper.spawn(p.argv0, p.argv, p.attr)
	syscall.Close(sp[1])
	p.closeChildEnds()
	if err != nil {
		syscall.Close(sp[0])
		p.closeAll()
		return nil
	}
	pinOOM(pid)
	return &prestart{kind: forkServer, step: st, script: script, pid: pid, exited: exited, ctl: sp[0], inodes: inodes, proc: p}
}

// takePrestart returns the fork server when run can use it, ready; when it
// cannot, it stops the server (before the run's files are written) and
// returns nil.
func (s *Server) takePrestart(run *RunRequest) *prestart {
	pre := s.pre
	if pre == nil || (len(run.Steps) == 1 && run.Steps[0].FreshCase && len(run.Files) == 0) {
		return nil // a test case's: readyStep keeps or drops it (case_linux.go)
	}
	if s.prestartFits(pre, run) {
		if pre.kind == fifoStart {
			s.pre = nil // the run's own process from here on
			return pre
		}
		err := s.awaitReady(pre)
		if err == nil {
			return pre
		}
		fmt.Fprintf(os.Stderr, "agent: prestart: %v; starting cold\n", err)
	}
	s.dropPrestart()
	return nil
}

func (s *Server) prestartFits(pre *prestart, run *RunRequest) bool {
	if !prestartable(run) || !pre.sameStep(run.Steps[0]) || !pre.alive() {
		return false
	}
	if pre.kind == fifoStart && len(run.Steps[0].Stdin) > 0 {
		return false // the interpreter is running, on the stdin it started with
	}
	n := 0
	for _, f := range run.Files {
		name := filepath.Clean(f.Path)
		if name == pre.script {
			n++
			if pre.kind == forkServer && bytes.Contains(f.Data, []byte("PK\x05\x06")) {
				return false // maybe a zip application: CPython would run it as one
			}
			if pre.lead != nil && !rubyScriptFits(f.Data, pre.lead) {
				return false
			}
		}
		if pre.kind == fifoStart && !fifoFileFits(pre.step, name, pre.script) {
			return false
		}
	}
	return n == 1
}

// awaitReady waits, up to a second, for the server to finish its start-up,
// checks that it wrote nothing (what a cold start prints at start-up, every
// run would print), and removes its placeholder script.
func (s *Server) awaitReady(pre *prestart) error {
	if pre.ready {
		return nil
	}
	st, _, err := s.forkReply(pre, time.Second)
	if err != nil {
		return err
	}
	if st != forkReady {
		return fmt.Errorf("the fork server answered %d, not ready", st)
	}
	for _, r := range []*os.File{pre.proc.outR, pre.proc.errR} {
		_ = r.SetReadDeadline(time.Now())
		if n, _ := r.Read(make([]byte, 1)); n > 0 {
			return errors.New("the interpreter wrote output while starting")
		}
	}
	pre.proc.closeAll()
	pre.proc = nil
	if !pre.forCase {
		if err := os.Remove(filepath.Join(s.cfg.WorkDir, pre.script)); err != nil {
			return fmt.Errorf("remove the placeholder script: %w", err)
		}
	}
	pre.ready = true
	return nil
}

// forkReply reads one reply of the server, waiting at most d.
func (s *Server) forkReply(pre *prestart, d time.Duration) (status, pid int32, err error) {
	tv := syscall.NsecToTimeval(int64(d))
	if err := syscall.SetsockoptTimeval(pre.ctl, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return 0, 0, err
	}
	var m [8]byte
	for {
		n, _, _, _, err := syscall.Recvmsg(pre.ctl, m[:], nil, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.EAGAIN) {
			return 0, 0, errors.New("the fork server did not answer")
		}
		if err != nil {
			return 0, 0, fmt.Errorf("the fork server's socket: %w", err)
		}
		if n != len(m) {
			return 0, 0, errors.New("the fork server is gone")
		}
		return int32(binary.NativeEndian.Uint32(m[:4])), int32(binary.NativeEndian.Uint32(m[4:])), nil
	}
}

// prefork asks the server for the next run's process, ahead of the run:
// cloned as the agent's child, it waits for the run's
// streams.
func (s *Server) prefork(pre *prestart) error {
	if pre.next != nil {
		return nil
	}
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	inodes := sockInodes(sp[:])
	err = syscall.Sendmsg(pre.ctl, []byte("fork"), syscall.UnixRights(sp[1]), nil, syscall.MSG_NOSIGNAL)
	syscall.Close(sp[1])
	if err != nil {
		syscall.Close(sp[0])
		return fmt.Errorf("ask the fork server: %w", err)
	}
	st, pid, err := s.forkReply(pre, time.Second)
	switch {
	case err != nil:
	case st == forkTainted:
		err = errors.New("the fork server was changed by a job")
	case st != forkPID || pid <= 1:
		err = fmt.Errorf("the fork server could not fork (%d)", st)
	}
	if err != nil {
		syscall.Close(sp[0])
		return err
	}
	exited, ok := s.reaper.adopt(int(pid))
	if !ok {
		syscall.Close(sp[0])
		return errors.New("the forked process is gone")
	}
	pre.next = &forked{pid: int(pid), exited: exited, sock: sp[0], inodes: inodes}
	return nil
}

// forkStep makes the forked process the step's: p's child ends become its
// stdin, stdout and stderr, and it runs the script.
func (s *Server) forkStep(pre *prestart, p *stepProc) (int, <-chan exitInfo, error) {
	if err := s.prefork(pre); err != nil { // the first run of a new server
		p.closeChildEnds()
		return 0, nil, err
	}
	f := pre.next
	pre.next = nil
	rights := syscall.UnixRights(int(p.stdinR.Fd()), int(p.outW.Fd()), int(p.errW.Fd()))
	err := syscall.Sendmsg(f.sock, []byte("go"), rights, nil, syscall.MSG_NOSIGNAL)
	p.closeChildEnds()
	syscall.Close(f.sock)
	if err != nil {
		s.killForked(f)
		return 0, nil, fmt.Errorf("start the forked process: %w", err)
	}
	return f.pid, f.exited, nil
}

// killForked kills a forked process no run will use, and waits, bounded.
func (s *Server) killForked(f *forked) {
	_ = syscall.Kill(f.pid, syscall.SIGKILL)
	select {
	case <-f.exited:
	case <-time.After(s.cfg.KillGrace):
	}
}

// sockInodes returns the inodes of socket descriptors.
func sockInodes(fds []int) []uint64 {
	var inodes []uint64
	for _, fd := range fds {
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) == nil {
			inodes = append(inodes, st.Ino)
		}
	}
	return inodes
}

// dropPrestart stops the fork server and removes its placeholder script if
// it is still there.
func (s *Server) dropPrestart() {
	pre := s.pre
	if pre == nil {
		return
	}
	s.pre = nil
	if pre.kind == fifoStart {
		s.discardFIFO(pre)
		return
	}
	if pre.next != nil {
		syscall.Close(pre.next.sock)
		s.killForked(pre.next)
		pre.next = nil
	}
	s.killPrestart(pre)
	if pre.proc != nil {
		pre.proc.closeAll()
	}
	syscall.Close(pre.ctl)
	if !pre.ready && !pre.forCase {
		_ = os.Remove(filepath.Join(s.cfg.WorkDir, pre.script))
	}
}

// killPrestart kills the server (it runs no one's code) and waits for it,
// bounded.
func (s *Server) killPrestart(pre *prestart) {
	if !pre.alive() { // killed already, or reaped
		return
	}
	pre.killed = true
	_ = syscall.Kill(pre.pid, syscall.SIGKILL)
	select {
	case <-pre.exited:
	case <-time.After(s.cfg.KillGrace):
		killAll(s.cfg.KillGrace)
	}
}

// sparePIDs are the fork server's PID and its forked process's while they
// may outlive a run; none if there is no ready server.
func (s *Server) sparePIDs() []int {
	pre := s.pre
	if pre == nil || !pre.ready || !pre.alive() {
		return nil
	}
	if pre.next != nil {
		return []int{pre.pid, pre.next.pid}
	}
	return []int{pre.pid}
}

// spareInodes are the inodes of the kept fork server's sockets.
func (s *Server) spareInodes() []uint64 {
	if s.sparePIDs() == nil {
		return nil
	}
	if s.pre.next != nil {
		return append(slices.Clone(s.pre.inodes), s.pre.next.inodes...)
	}
	return s.pre.inodes
}

// killOthers kills what a run left behind. When the only processes left
// are a ready fork server and the process it forked for the next run,
// asleep (not stopped or traced), they are kept; anything else, and they
// with it, is killed (killAll: kill(-1) stops a fork bomb where killing
// one PID at a time might not).
func (s *Server) killOthers() []int {
	if spare := s.sparePIDs(); spare != nil {
		left, err := otherPIDs()
		kept := err == nil
		for _, p := range left {
			st := procState(p) // not stopped or traced
			kept = kept && slices.Contains(spare, p) && (st == 'S' || st == 'R')
		}
		if kept {
			return nil
		}
	}
	if s.pre != nil {
		s.pre.killed = true // killAll takes it too; dropPrestart closes its sockets
	}
	return killAll(s.cfg.KillGrace)
}

// procState is the state letter of /proc/<pid>/stat, 0 if unreadable.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
