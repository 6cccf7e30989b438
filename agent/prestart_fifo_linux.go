//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A FIFO start (fifoStart) is the prestart of an interpreter that cannot be
// forked once started: Node.js runs V8's and libuv's threads from its first
// moments, and a fork keeps only the thread that called it. After the scrub
// that follows a run whose step asked for it, the agent starts that same
// step again, exactly as it would for the next run (same argv, env,
// rlimits, uid, session, streams: the step's own pipes), with a FIFO where
// its script will be. Node boots (most of the ~140 ms a cold
// console.log job takes here; 26 ms warm), resolves the script's path and
// blocks opening it. When the next run is that same step, the agent writes
// the run's files with the script under a staging name, opens the FIFO for
// writing (which returns once Node has opened it), renames the real script
// over the FIFO, so that whatever reads the file later reads it, and writes
// the source through the FIFO. Node reads it to its end, and compiles and
// runs it as the file it would have read: its output was the run's from
// the start, on the run's pipes.
//
// Nothing of one job reaches the next: the process starts after a scrub and
// has run nobody's code when its run takes it, and it is used for that run
// only. What differs from a cold start, and cannot be helped: the time
// since the process started (process.uptime(), performance.now()) counts
// the wait, and the container holds the waiting process (~40 MB) until
// the next run or the hold (Config.PrestartHold).
//
// Node reads one file of the work dir before its script: package.json,
// whose "type" decides how the script is loaded. A run whose files hold
// one (or anything at the staging name) starts cold, as does any run that
// is not that same step.

// fifoFileFits reports whether a run's file, by its clean path, can be
// written beside a FIFO start of script.
func fifoFileFits(name, script string) bool {
	top, _, _ := strings.Cut(name, string(filepath.Separator))
	return top != "package.json" && name != stagedScript(script)
}

// stagedScript is where a run's script is written until it takes the
// FIFO's place.
func stagedScript(script string) string { return ".sandq-prestart-" + script }

// startFIFO starts st on a FIFO at script, after a clean scrub. Failing
// leaves no prestart: the next run starts cold.
func (s *Server) startFIFO(st Step, script string) {
	path := filepath.Join(s.cfg.WorkDir, script)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return
	}
	// The interpreter runs as the job uid and opens it.
	if err := os.Lchown(path, s.cfg.JobUID, s.cfg.JobGID); err != nil {
		_ = os.Remove(path)
		return
	}
	p, err := s.prepareStep(st)
	if err != nil {
		_ = os.Remove(path)
		return
	}
	pid, exited, err := s.reaper.spawn(p.argv0, p.argv, p.attr)
	p.closeChildEnds()
	if err != nil {
		p.closeAll()
		_ = os.Remove(path)
		return
	}
	pinOOM(pid)
	s.pre = &prestart{kind: fifoStart, step: st, script: script, pid: pid, exited: exited, ctl: -1, proc: p}
}

// stageFiles returns the run's files with the script renamed to its
// staging name, and keeps its source for feedFIFO.
func (pre *prestart) stageFiles(files []File) []File {
	out := make([]File, len(files))
	for i, f := range files {
		if filepath.Clean(f.Path) == pre.script {
			pre.source = f.Data
			f.Path = stagedScript(pre.script)
		}
		out[i] = f
	}
	return out
}

// fifoBootWait bounds how long a run waits for a FIFO start to open its
// script (never more than the run's own timeout): only a wedged process
// takes that long, and then the run starts cold.
const fifoBootWait = 10 * time.Second

// feedFIFO starts the run's program in the waiting process: it opens the
// FIFO for writing (the open returns when the interpreter, which may still
// be starting up, opens it to read its script), renames the staged script
// over the FIFO and writes the source through it. The interpreter is given
// up to fifoBootWait to get there: still booting, it is closer to running
// the script than a cold start would be (under gVisor, or on a loaded
// machine, Node's boot can take a second). Whatever fails, the real script
// is left in place for a cold start.
func (s *Server) feedFIFO(pre *prestart) error {
	path := filepath.Join(s.cfg.WorkDir, pre.script)
	staged := filepath.Join(s.cfg.WorkDir, stagedScript(pre.script))
	type opened struct {
		fd  int
		err error
	}
	done := make(chan opened, 1)
	go func() {
		// Blocking, on a thread of its own: the open returns the moment the
		// reader arrives, with no polling interval in the way.
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		done <- opened{fd, err}
	}()
	var o opened
	got := false
	timer := time.NewTimer(min(fifoBootWait, max(pre.step.Timeout, time.Second)))
	defer timer.Stop()
	select {
	case o = <-done:
		got = true
	case <-pre.exited:
		pre.killed = true // reaped: the PID may be another's
	case <-timer.C:
	}
	if !got {
		// No reader came: release the blocked open with a reader of our
		// own, and close whatever it opened.
		if rfd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0); err == nil {
			if o = <-done; o.err == nil {
				syscall.Close(o.fd)
			}
			syscall.Close(rfd)
		}
		_ = os.Rename(staged, path)
		return errors.New("the interpreter did not open its script")
	}
	if o.err != nil {
		_ = os.Rename(staged, path)
		return fmt.Errorf("open the script's FIFO: %w", o.err)
	}
	if err := syscall.SetNonblock(o.fd, true); err != nil {
		syscall.Close(o.fd)
		_ = os.Rename(staged, path)
		return err
	}
	f := os.NewFile(uintptr(o.fd), path) // non-blocking: deadlines work
	defer f.Close()
	if err := os.Rename(staged, path); err != nil {
		s.killPrestart(pre)
		return fmt.Errorf("put the script in place: %w", err)
	}
	_ = f.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if _, err := f.Write(pre.source); err != nil {
		// Closing now would run a truncated script: kill it first.
		s.killPrestart(pre)
		return fmt.Errorf("write the script: %w", err)
	}
	return nil
}

// discardFIFO kills a FIFO start no run will use (it has run nothing: its
// script was never complete), closes its streams, and removes the FIFO if
// it is still there.
func (s *Server) discardFIFO(pre *prestart) {
	s.killPrestart(pre)
	pre.proc.closeAll()
	path := filepath.Join(s.cfg.WorkDir, pre.script)
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		_ = os.Remove(path)
	}
}
