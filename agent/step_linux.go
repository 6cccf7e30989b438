//go:build linux

package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// stepProc is one step's process being set up: its argv, attributes and
// the pipes to its standard streams.
type stepProc struct {
	argv0  string
	argv   []string
	attr   *syscall.ProcAttr
	stdinR *os.File // the child's ends, closed once it has started
	stdinW *os.File // ours: nil when the step has no stdin, or all of it is in the pipe
	stdin  []byte   // what of the stdin is left to write through stdinW
	outR   *os.File
	outW   *os.File
	errR   *os.File
	errW   *os.File
}

// prepareStep makes the pipes and resolves the program. The fast path execs
// the program directly: the container's ulimits (the agent's own) already
// are the step's. Only a step that asks for tighter rlimits goes through the
// launcher, which costs a Go runtime start (a few ms).
func (s *Server) prepareStep(st Step) (*stepProc, error) {
	if len(st.Argv) == 0 {
		return nil, fmt.Errorf("empty argv")
	}
	p := &stepProc{}
	var err error
	if len(st.Stdin) > 0 {
		if p.stdinR, p.stdinW, err = os.Pipe(); err == nil {
			// What the pipe's buffer holds (64 KiB) is in it before the
			// process starts, and a stdin that fits is closed there: the
			// process reads its input and EOF without waiting on the
			// agent. Written by a goroutine after the start, the input of
			// a judge-shaped job cost a block and a wake of the process,
			// and at c=4 on two cores, its wait for a CPU.
			n := prefill(p.stdinW, st.Stdin)
			if p.stdin = st.Stdin[n:]; len(p.stdin) == 0 {
				p.stdinW.Close()
				p.stdinW = nil
			}
		}
	} else {
		p.stdinR, err = os.Open(os.DevNull)
	}
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	env := mergeEnv(s.baseEnv, st.Env)
	p.argv0, p.argv = s.self, append([]string{LaunchArg0, encodeRlimits(st.Rlimits)}, st.Argv...)
	if rlimitsInherited(st.Rlimits) {
		path, err := lookPath(st.Argv[0], env, s.cfg.WorkDir)
		if err != nil {
			p.closeAll()
			return nil, err
		}
		p.argv0, p.argv = path, st.Argv
	}
	p.attr = &syscall.ProcAttr{
		Dir:   s.cfg.WorkDir,
		Env:   env,
		Files: []uintptr{p.stdinR.Fd(), p.outW.Fd(), p.errW.Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid: true,
			Credential: &syscall.Credential{
				Uid: uint32(s.cfg.JobUID), Gid: uint32(s.cfg.JobGID), Groups: []uint32{},
			},
		},
	}
	return p, nil
}

// closeChildEnds closes the child's ends of the pipes once it has them.
func (p *stepProc) closeChildEnds() { closeAll(p.stdinR, p.outW, p.errW) }

func (p *stepProc) closeAll() { closeAll(p.stdinR, p.stdinW, p.outR, p.outW, p.errR, p.errW) }

// prefill writes to the pipe w what of data its buffer takes now, without
// blocking, and returns how much.
func prefill(w *os.File, data []byte) int {
	rc, err := w.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Write(func(fd uintptr) bool {
		for n < len(data) {
			m, err := syscall.Write(int(fd), data[n:])
			if err != nil || m <= 0 {
				break // EAGAIN: full; anything else is the writer's after the start
			}
			n += m
		}
		return true
	})
	return n
}

// runStep runs one step as the job uid and reports what happened to it.
// It returns within the step's timeout plus a few KillGrace periods,
// whatever the program does: every wait after the kill is bounded.
//
// pre, when set, is the interpreter started for this step (prestart_linux.go):
// the step's process is forked from the fork server, or is the FIFO start
// fed its script, instead of spawned; if that fails, it is stopped and the
// step started cold.
func (s *Server) runStep(st Step, memLimit int64, cancel <-chan struct{}, liveSend func(ch LiveChunk, last bool), pre *prestart) StepResult {
	res := StepResult{Name: st.Name, ExitCode: -1}
	timeout := st.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	oomBefore := s.mem.oomKills()
	s.reaper.takeOrphanCPU()
	start := time.Now()
	var p *stepProc
	// A prestarted process's OOM score was pinned when it started (a fork
	// server's children inherit it); a cold one's is pinned below.
	var exited <-chan exitInfo
	if pre != nil && pre.kind == fifoStart {
		start = time.Now()
		if err := s.feedFIFO(pre); err != nil {
			s.discardFIFO(pre)
			fmt.Fprintf(os.Stderr, "agent: prestart: %v; starting cold\n", err)
		} else {
			p, exited = pre.proc, pre.exited
			res.Prestarted = true
		}
	} else if pre != nil {
		var err error
		if p, err = s.prepareStep(st); err == nil {
			start = time.Now()
			if _, exited, err = s.forkStep(pre, p); err != nil {
				closeAll(p.outR, p.errR, p.stdinW)
				p = nil
			}
		}
		if err != nil {
			s.dropPrestart()
			fmt.Fprintf(os.Stderr, "agent: prestart: %v; starting cold\n", err)
		} else {
			res.Prestarted = true
		}
	}
	if p == nil {
		var err error
		if p, err = s.prepareStep(st); err != nil {
			res.Error = err.Error()
			return res
		}
		start = time.Now()
		var pid int
		pid, exited, err = s.reaper.spawn(p.argv0, p.argv, p.attr)
		p.closeChildEnds()
		if err != nil {
			closeAll(p.outR, p.errR, p.stdinW)
			res.Error = fmt.Sprintf("cannot run %s: %v", st.Argv[0], err)
			return res
		}
		pinOOM(pid)
	}
	res.Started = true
	stopWatch := s.mem.watch(memLimit)

	stdout, stderr := newCapture(st.OutputLimit), newCapture(st.OutputLimit)
	var outW, errW io.Writer = stdout, stderr
	if st.Live && liveSend != nil {
		l := newLive(0, st.Name, st.OutputLimit, liveSend)
		defer l.close() // after the drain: everything written is sent
		outW, errW = io.MultiWriter(stdout, l.writer(0)), io.MultiWriter(stderr, l.writer(1))
	}
	var drained sync.WaitGroup
	drained.Add(2)
	copyOut := func(w io.Writer, r io.Reader) {
		defer drained.Done()
		buf := drainBufs.Get().(*[]byte)
		defer drainBufs.Put(buf)
		_, _ = io.CopyBuffer(w, onlyReader{r}, *buf)
	}
	go copyOut(outW, p.outR)
	go copyOut(errW, p.errR)
	if p.stdinW != nil {
		go func() { _, _ = p.stdinW.Write(p.stdin); p.stdinW.Close() }()
	}

	ei, reaped := s.await(exited, timeout, cancel, &res)
	res.WallNs = int64(time.Since(start))
	// Whatever the step started and left behind dies with it.
	s.killOthers()
	stopWatch()
	if !reaped {
		// Unkillable (stuck in the kernel): the scrub will find it and
		// the container is discarded.
		select {
		case ei = <-exited:
			reaped = true
		case <-time.After(s.cfg.KillGrace):
			res.Error = "the program could not be killed"
		}
	}
	drain(&drained, p.outR, p.errR)

	if reaped {
		ws := ei.status
		switch {
		case ws.Exited():
			res.ExitCode = ws.ExitStatus()
		case ws.Signaled():
			res.Signal = int(ws.Signal())
		}
		res.MaxRSSKB = ei.rusage.Maxrss
		res.CPUNs = int64(rusageCPU(&ei.rusage))
	} else {
		res.Signal = int(syscall.SIGKILL)
	}
	if s.mem.oomKills() > oomBefore {
		res.OOMKilled = true
	}
	res.CPUNs += int64(s.reaper.takeOrphanCPU())
	res.Stdout, res.Stderr = stdout.output(), stderr.output()
	return res
}

// await waits for the step's process to exit, or for its timeout or a
// cancel, when it kills every job process and waits, bounded, for the
// exit. reaped is false when the process did not go.
func (s *Server) await(exited <-chan exitInfo, timeout time.Duration, cancel <-chan struct{}, res *StepResult) (exitInfo, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ei := <-exited:
		return ei, true
	case <-timer.C:
		res.TimedOut = true
	case <-cancel:
		res.Canceled = true
	}
	killAll(s.cfg.KillGrace)
	select {
	case ei := <-exited:
		return ei, true
	case <-time.After(s.cfg.KillGrace):
		return exitInfo{}, false
	}
}

// drain waits for the output copies to end: every writer is dead, so the
// pipes are at EOF; the bound guards only against a process that could not
// be killed.
func drain(drained *sync.WaitGroup, outR, errR *os.File) {
	done := make(chan struct{})
	go func() { drained.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		outR.Close()
		errR.Close()
		<-done
	}
	outR.Close()
	errR.Close()
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// rlimitsInherited reports whether the agent's own limits (the container's
// ulimits, inherited by every child) already satisfy want.
func rlimitsInherited(want Rlimits) bool {
	if want.CPU != 0 || want.Stack != 0 {
		return false
	}
	for res, v := range map[int]uint64{syscall.RLIMIT_NOFILE: want.NoFile, syscall.RLIMIT_FSIZE: want.FileSize} {
		if v == 0 {
			continue
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err != nil || cur.Max > v || cur.Cur > v {
			return false
		}
	}
	return true
}

// lookPath resolves argv[0] like execvp, with the step's PATH; relative
// names with a slash are resolved against the work dir.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("cannot run %s: not found in PATH", name)
}

// drainBufs are the buffers a step's output pipes are read through, kept
// from one step to the next rather than allocated per step.
var drainBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// onlyReader hides a reader's WriterTo, so io.CopyBuffer uses the buffer
// it is given.
type onlyReader struct{ io.Reader }

// warmThreads makes the Go runtime start n OS threads now, while the
// container's pids limit has room. The runtime keeps idle threads for reuse,
// so when a fork bomb later exhausts the limit the agent still has threads
// to kill it with, instead of dying on a failed clone.
func warmThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.NsecToTimespec(int64(20 * time.Millisecond))
			_, _, _ = syscall.Syscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		}()
	}
	wg.Wait()
}
