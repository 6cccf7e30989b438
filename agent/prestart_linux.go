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
	"unicode/utf8"
)

// A prestart takes interpreter start-up off the job's path. After the scrub
// that follows a run whose step asked for it (Step.Prestart), the agent
// starts that same step again, exactly as it would for the next job (same
// argv, env, rlimits, uid, session, streams), but with a FIFO where the
// script will be. CPython initializes (site, encodings, sys.path) and then
// blocks opening the script. When the next run brings the same step, the
// agent writes the script beside the FIFO, renames it over the FIFO (so a
// traceback or inspect reads the real file) and feeds the source through the
// FIFO; Python compiles and runs it as it would have run the file. Nothing of
// the previous job reaches it: it starts after the scrub, and until it is
// fed it runs no code of anyone's.
//
// It is used only when the outcome cannot differ from a cold start: the run
// is that one step with the same argv, env and rlimits, no stdin (a cold
// start gets /dev/null, and so does the prestart), no libraries and no
// egress; the script is UTF-8 without NUL bytes and is not a zip archive
// (CPython runs a zip file by path, which a FIFO cannot be). Anything else,
// or a failure to feed it, kills the waiting interpreter and starts cold.
type prestart struct {
	step   Step   // as asked, Stdin nil
	script string // the script's path in the work dir, where the FIFO is
	source []byte // the run's script, once taken
	killed bool
	proc   *stepProc
	pid    int
	exited <-chan exitInfo
}

// prestartScript returns the script a step runs when it is an interpreter
// the agent knows how to prestart: `python3 <file>.py [args...]`, the file
// a plain relative path in the work dir.
func prestartScript(st Step) (string, bool) {
	if !st.Prestart || len(st.Argv) < 2 || len(st.Stdin) > 0 {
		return "", false
	}
	if st.Argv[0] != "python3" {
		return "", false
	}
	script := st.Argv[1]
	if strings.HasPrefix(script, "-") || !strings.HasSuffix(script, ".py") ||
		!filepath.IsLocal(script) || filepath.Clean(script) != script {
		return "", false
	}
	return script, true
}

// nextPrestart records the step to prestart after this run's scrub, or
// nothing when the run does not qualify.
func (s *Server) nextPrestart(run *RunRequest) {
	s.preStep = nil
	if len(run.Steps) != 1 || run.Libs != nil || run.Egress != "" {
		return
	}
	if _, ok := prestartScript(run.Steps[0]); ok {
		st := run.Steps[0]
		st.Stdin = nil
		s.preStep = &st
	}
}

// startPrestart starts the recorded step on a FIFO, after a clean scrub.
// Failing leaves no prestart: the next run starts cold.
func (s *Server) startPrestart() {
	if s.preStep == nil || s.pre != nil || s.sess != nil {
		return
	}
	st := *s.preStep
	script, _ := prestartScript(st)
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
	s.pre = &prestart{step: st, script: script, proc: p, pid: pid, exited: exited}
}

// takePrestart returns the waiting interpreter when run can use it, and
// otherwise kills it (before the run's files are written) and returns nil.
func (s *Server) takePrestart(run *RunRequest) *prestart {
	pre := s.pre
	if pre == nil {
		return nil
	}
	s.pre = nil
	if s.prestartFits(pre, run) {
		return pre
	}
	s.dropPrestart(pre)
	return nil
}

func (s *Server) prestartFits(pre *prestart, run *RunRequest) bool {
	if len(run.Steps) != 1 || run.Libs != nil || run.Egress != "" {
		return false
	}
	st := run.Steps[0]
	if !st.Prestart || len(st.Stdin) > 0 || !slices.Equal(st.Argv, pre.step.Argv) || !slices.Equal(st.Env, pre.step.Env) ||
		st.Rlimits != pre.step.Rlimits {
		return false
	}
	select {
	case <-pre.exited:
		return false // it died waiting (killed from outside): start cold
	default:
	}
	n := 0
	for _, f := range run.Files {
		if filepath.Clean(f.Path) == pre.script {
			n++
			if !plainSource(f.Data) {
				return false
			}
		}
	}
	return n == 1
}

// plainSource reports whether CPython would read data as source text both
// from a file and from a FIFO: UTF-8 (a coding cookie for another encoding
// starts cold), no NUL byte, and no zip end-of-directory record (a zip
// archive is run as an application only from a regular file).
func plainSource(data []byte) bool {
	return utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 && !bytes.Contains(data, []byte("PK\x05\x06"))
}

// dropPrestart kills a waiting interpreter the run cannot use and removes
// its FIFO. Only it runs as the job uid at this point.
func (s *Server) dropPrestart(pre *prestart) {
	s.killPrestart(pre)
	pre.proc.closeAll()
	_ = os.Remove(filepath.Join(s.cfg.WorkDir, pre.script))
}

// writeFilesPrestart writes the run's files with the script beside the
// FIFO, under a temporary name, for feedPrestart to put in place.
func (s *Server) writeFilesPrestart(pre *prestart, files []File) (tmp string, err error) {
	tmp = filepath.Join(filepath.Dir(pre.script), ".sandq-prestart-"+filepath.Base(pre.script))
	out := make([]File, len(files))
	for i, f := range files {
		if filepath.Clean(f.Path) == pre.script {
			pre.source = f.Data
			f.Path = tmp
		}
		out[i] = f
	}
	return tmp, s.writeFiles(out)
}

// feedPrestart starts the program: it opens the FIFO for writing (the
// open returns when the interpreter, which may still be starting up, opens
// it to read its script), renames the real script over the FIFO and writes
// the source through it. The interpreter is given up to a second to get
// there.
func (s *Server) feedPrestart(pre *prestart, tmp string) error {
	path := filepath.Join(s.cfg.WorkDir, pre.script)
	tmpPath := filepath.Join(s.cfg.WorkDir, tmp)
	type opened struct {
		fd  int
		err error
	}
	done := make(chan opened, 1)
	go func() {
		// Blocking, on a thread of its own: the open returns the moment
		// the reader arrives, with no polling interval in the way.
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		done <- opened{fd, err}
	}()
	var o opened
	got := false
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case o = <-done:
		got = true
	case <-pre.exited:
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
		_ = os.Rename(tmpPath, path)
		return errors.New("the interpreter did not open its script")
	}
	if o.err != nil {
		_ = os.Rename(tmpPath, path)
		return fmt.Errorf("open the script's FIFO: %w", o.err)
	}
	if err := syscall.SetNonblock(o.fd, true); err != nil {
		syscall.Close(o.fd)
		return err
	}
	f := os.NewFile(uintptr(o.fd), path) // non-blocking: deadlines work
	defer f.Close()
	if err := os.Rename(tmpPath, path); err != nil {
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

// killPrestart kills the interpreter (it has run nothing: its script was
// never complete) and waits for it, bounded.
func (s *Server) killPrestart(pre *prestart) {
	if pre.killed {
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
