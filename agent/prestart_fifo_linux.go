//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// A FIFO start (fifoStart) is the prestart of an interpreter that is not
// forked once started: Node.js runs V8's and libuv's threads from its first
// moments, and a fork keeps only the thread that called it; Ruby opens its
// script before the slow part of its start-up (below). After the scrub that
// follows a run whose step asked for it, the agent starts that same step
// again, exactly as it would for the next run (same argv, env, rlimits,
// uid, session, streams: the step's own pipes), with a FIFO where its
// script will be. Node boots (most of the ~140 ms a cold console.log job
// takes here; 26 ms warm), resolves the script's path and blocks opening
// it. When the next run is that same step, the agent writes the run's
// files with the script under a staging name, opens the FIFO for writing
// (which returns once Node has opened it), renames the real script over
// the FIFO, so that whatever reads the file later reads it, and writes the
// source through the FIFO. Node reads it to its end, and compiles and runs
// it as the file it would have read: its output was the run's from the
// start, on the run's pipes.
//
// Ruby opens its script before it loads RubyGems (9 of the 53 ms a cold
// `puts 1` takes here): it reads the first bytes for a "#!" line, whose
// switches may turn RubyGems off, and only then loads it and parses the
// rest. A Ruby FIFO start is therefore fed, as it starts, the first bytes
// of the script of the run that asked for it (rubyLead: one byte, or two
// when the first is '#'), through a read-write end the agent keeps; Ruby
// reads them, loads RubyGems and blocks reading the rest. The next run
// fits only if its own script begins with those bytes: what Ruby read, in
// what order, is then exactly what a cold start of that script reads, and
// the agent feeds the rest the same way as Node's.
//
// Nothing of one job reaches the next: the process starts after a scrub and
// has run nobody's code when its run takes it, and it is used for that run
// only (a Ruby start holds one or two bytes of a previous script, and runs
// only a script that begins with them). What differs from a cold start, and
// cannot be helped: the time since the process started (process.uptime(),
// performance.now(), Ruby's Process.clock_gettime of the process) counts
// the wait, and the container holds the waiting process (~40 MB for Node,
// ~14 for Ruby, ~170 for TypeScript's compiler, its snapshot deserialized)
// until the next run or the hold (Config.PrestartHold).
//
// What an interpreter reads of the work dir before its script's content
// must not be among the run's files, or the run starts cold: Node reads
// package.json, whose "type" decides how the script is loaded; Ruby
// resolves, against its working directory, the names of the features it
// provides at boot (rubyBootFeatures): a file of that name in the work dir
// changes what a later require_relative loads. Ruby's environment could
// point its start-up at the work dir too (RUBYOPT -r, RUBYLIB, GEM_PATH, a
// HOME or XDG_DATA_HOME of user gems there): a step that sets any of those
// is not started ahead. A Ruby script with __END__ starts cold too: its
// DATA is the script's own open file, and a FIFO cannot seek. Any run that
// is not that same step starts cold.

// fifoFileFits reports whether a run's file, by its clean path, can be
// written beside a FIFO start of st on script.
func fifoFileFits(st Step, name, script string) bool {
	if name == stagedScript(script) {
		return false
	}
	top, _, _ := strings.Cut(name, string(filepath.Separator))
	switch {
	case isTSC(st):
		return true // sandq-tsc reads its file first, then the rest
	case st.Argv[0] == "node":
		return top != "package.json"
	case st.Argv[0] == "ruby":
		return !slices.Contains(rubyBootFeatures, top)
	}
	return false
}

// fifoEnvFits reports whether a step's environment leaves its
// interpreter's start-up out of the work dir, so that a start ahead of the
// run's files reads what a cold start reads: nothing that adds to what it
// loads, or names a file it reads as it starts. Ruby: RUBY* (RUBYOPT -r,
// RUBYLIB), GEM_*, BUNDLE*, XDG_* (user gems) and HOME; Node.js:
// NODE_OPTIONS (--require), NODE_EXTRA_CA_CERTS, NODE_ICU_DATA,
// OPENSSL_CONF, SSL_CERT_FILE and SSL_CERT_DIR.
func fifoEnvFits(interp string, env []string) bool {
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch interp {
		case "ruby":
			for _, p := range []string{"RUBY", "GEM", "BUNDLE", "XDG_"} {
				if strings.HasPrefix(k, p) {
					return false
				}
			}
			if k == "HOME" {
				return false
			}
		case "node":
			switch k {
			case "NODE_OPTIONS", "NODE_EXTRA_CA_CERTS", "NODE_ICU_DATA", "OPENSSL_CONF", "SSL_CERT_FILE", "SSL_CERT_DIR":
				return false
			}
		}
	}
	return true
}

// rubyBootFeatures are the features Ruby 3.1 provides at boot under a
// relative name ($LOADED_FEATURES without a '/'; sandbox
// TestPrestartRubyBootFeatures checks the image's list): Ruby resolves
// them against its working directory, and a require_relative of a work-dir
// file of that name is then taken as loaded.
var rubyBootFeatures = []string{"enumerator.so", "thread.rb", "fiber.so", "rational.so", "complex.so", "ruby2_keywords.rb"}

// rubyLead returns the bytes of a Ruby script that Ruby reads before it
// loads RubyGems: the first, or the first two when the first is '#' (it
// looks for "#!"). Nil when none can be fed ahead: an empty script, a
// lone '#', or a "#!" line (Ruby reads that line's switches first).
func rubyLead(src []byte) []byte {
	switch {
	case len(src) == 0:
		return nil
	case src[0] != '#':
		return slices.Clone(src[:1])
	case len(src) >= 2 && src[1] != '!':
		return slices.Clone(src[:2])
	}
	return nil
}

// rubyScriptFits reports whether a Ruby FIFO start fed lead can run src:
// src begins with lead, and has no __END__ (DATA would be the FIFO).
func rubyScriptFits(src, lead []byte) bool {
	return bytes.HasPrefix(src, lead) && !bytes.Contains(src, []byte("__END__"))
}

// stagedScript is where a run's script is written until it takes the
// FIFO's place.
func stagedScript(script string) string { return ".sandq-prestart-" + script }

// startFIFO starts st on a FIFO at script, after a clean scrub. Failing
// leaves no prestart: the next run starts cold.
func (s *Server) startFIFO(st Step, script string, lead []byte) {
	path := filepath.Join(s.cfg.WorkDir, script)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return
	}
	// The interpreter runs as the job uid and opens it.
	if err := os.Lchown(path, s.cfg.JobUID, s.cfg.JobGID); err != nil {
		_ = os.Remove(path)
		return
	}
	var feed *os.File
	if lead != nil {
		// Read-write: the open does not wait for the reader, and the lead
		// waits in the pipe for the interpreter to open its script.
		fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		if err != nil {
			_ = os.Remove(path)
			return
		}
		feed = os.NewFile(uintptr(fd), path)
		if _, err := feed.Write(lead); err != nil {
			feed.Close()
			_ = os.Remove(path)
			return
		}
	}
	p, err := s.prepareStep(st)
	if err == nil {
		var pid int
		var exited <-chan exitInfo
		pid, exited, err = s.reaper.spawn(p.argv0, p.argv, p.attr)
		p.closeChildEnds()
		if err == nil {
			pinOOM(pid)
			s.pre = &prestart{kind: fifoStart, step: st, script: script, pid: pid, exited: exited, ctl: -1, proc: p, lead: lead, feed: feed}
			return
		}
		p.closeAll()
	}
	if feed != nil {
		feed.Close()
	}
	_ = os.Remove(path)
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
	if pre.feed != nil {
		return s.feedLead(pre)
	}
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

// feedLead feeds the rest of the run's script, after its lead, to a FIFO
// start fed the lead at its start, through the end the agent kept. It
// waits, up to fifoBootWait, for the interpreter to have read the lead (the
// pipe holds nothing more: still starting, it is closer to running the
// script than a cold start would be), puts the real script in place, writes
// the rest and closes the end, which is the script's end. The interpreter
// may still be loading RubyGems: a script longer than the pipe holds waits
// for it, within the same bound. Whatever fails, the real script is left
// in place for a cold start.
func (s *Server) feedLead(pre *prestart) error {
	path := filepath.Join(s.cfg.WorkDir, pre.script)
	staged := filepath.Join(s.cfg.WorkDir, stagedScript(pre.script))
	f := pre.feed
	pre.feed = nil
	defer f.Close()
	deadline := time.Now().Add(min(fifoBootWait, max(pre.step.Timeout, time.Second)))
	for {
		n, err := pipeQueued(f)
		if err == nil && n == 0 {
			break
		}
		if err != nil || !pre.alive() || time.Now().After(deadline) {
			_ = os.Rename(staged, path)
			if err == nil {
				err = errors.New("the interpreter did not read its script")
			}
			return err
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.Rename(staged, path); err != nil {
		s.killPrestart(pre)
		return fmt.Errorf("put the script in place: %w", err)
	}
	_ = f.SetWriteDeadline(deadline)
	if _, err := f.Write(pre.source[len(pre.lead):]); err != nil {
		s.killPrestart(pre) // closing now would run a truncated script
		return fmt.Errorf("write the script: %w", err)
	}
	return nil
}

// pipeQueued returns how many bytes wait in the pipe f is an end of
// (FIONREAD).
func pipeQueued(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, fmt.Errorf("FIONREAD on the script's FIFO: %w", errno)
	}
	return int(n), nil
}

// discardFIFO kills a FIFO start no run will use (it has run nothing: its
// script was never complete), closes its streams, and removes the FIFO if
// it is still there.
func (s *Server) discardFIFO(pre *prestart) {
	s.killPrestart(pre)
	if pre.feed != nil {
		pre.feed.Close()
		pre.feed = nil
	}
	pre.proc.closeAll()
	path := filepath.Join(s.cfg.WorkDir, pre.script)
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		_ = os.Remove(path)
	}
}
