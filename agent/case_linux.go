package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// Judge mode's cases (Step.FreshCase). A judged job is compiled once and
// run once per test case, each case a step of its own request. Before each
// case the agent kills every job process, empties the scratch mounts (every
// scrub dir but the work dir), removes SysV IPC objects, and, before the
// first, makes the work dir and everything in it root's and read-only to
// the job: the compiled program stays, and a case can leave nothing for the
// next one, in a file or elsewhere. The scrub after the job gives the work
// dir back to the job uid (and empties it).

// maxFreezeEntries bounds the walk that freezes the work dir: a compile
// step that made more entries than this is refused.
const maxFreezeEntries = 100_000

// freshCase readies the container for a test case, step st, and returns
// the fork server its process is to be forked from, if any.
//
// A Python case (a step the fork server can serve, prestart_linux.go) runs
// in a process forked from a server started for the job's cases: after the
// work dir is frozen, the agent starts CPython on the job's own script as
// a cold case would start, and from then on each case's process is forked
// from it, ready, instead of paying the interpreter's start-up. What holds
// for the fork server between jobs holds here between cases: the server
// runs no one's code, each fork serves one case, and a server a case
// changed refuses to fork (pyfork.c), which starts that case cold and the
// next one on a new server. The scrub after the job stops it: it started
// on that job's files.
func (s *Server) freshCase(st Step) (*prestart, error) {
	if pre := s.pre; pre != nil && !(pre.forCase && pre.ready && pre.alive() && pre.sameStep(st)) {
		s.dropPrestart() // the fork server of another step would outlive the case
	}
	if left := s.killOthers(); len(left) > 0 {
		return nil, fmt.Errorf("processes survive SIGKILL: %v", left)
	}
	if s.pre != nil && !s.pre.alive() {
		s.dropPrestart() // killed with what the last case left
	}
	var errs []error
	removed := 0
	for _, dir := range s.cfg.ScrubDirs {
		if dir == s.cfg.WorkDir {
			continue
		}
		n, err := emptyDir(dir)
		removed += n
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if removed > freeAfter {
		debug.FreeOSMemory() // as after a scrub: the next case is charged for it
	}
	if err := removeSysVIPC(); err != nil {
		errs = append(errs, err)
	}
	if !s.frozen {
		if err := freeze(s.cfg.WorkDir); err != nil {
			errs = append(errs, err)
		}
		s.frozen = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if s.pre == nil {
		s.startCaseServer(st)
	}
	return s.pre, nil
}

// startCaseServer starts the fork server of st's cases when st is a
// Python run it can serve and its script is a regular file in the frozen
// work dir, and waits until it is ready. Failing leaves none: the case
// starts cold.
func (s *Server) startCaseServer(st Step) {
	script, kind := prestartScript(st)
	if kind != forkServer || s.sess != nil {
		return
	}
	fi, err := os.Lstat(filepath.Join(s.cfg.WorkDir, script))
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	if zipApp(filepath.Join(s.cfg.WorkDir, script)) {
		return // CPython would run it as a zip application: start cold
	}
	pre := s.startForkServer(st, script)
	if pre == nil {
		return
	}
	pre.forCase = true
	s.pre = pre
	if err := s.awaitReady(pre); err != nil {
		fmt.Fprintf(os.Stderr, "agent: case fork server: %v; cases start cold\n", err)
		s.dropPrestart()
	}
}

// zipApp reports whether the file at path might be a zip archive (its
// end-of-central-directory signature anywhere in it), or cannot be read.
func zipApp(path string) bool {
	b, err := os.ReadFile(path)
	return err != nil || bytes.Contains(b, []byte("PK\x05\x06"))
}

// freeze makes dir and everything under it root's, with no write bit:
// directories 0555, files readable by all and executable by all when
// their owner could execute them. Symbolic links are not followed.
//
// A directory is read dirBatch names at a time, and only the names of its
// subdirectories are kept (to visit once it is closed, so one descriptor
// is open at a time): the whole walk holds at most maxFreezeEntries names,
// however many the compile step made.
func freeze(dir string) error {
	n := 0
	return freezeTree(dir, &n)
}

// freezeTree freezes dir and what is under it, counting entries in n.
func freezeTree(dir string, n *int) error {
	if isDir, err := freezeEntry(dir, n); err != nil || !isDir {
		return err
	}
	subdirs, err := freezeEntries(dir, n)
	if err != nil {
		return err
	}
	for _, sub := range subdirs {
		if err := freezeTree(filepath.Join(dir, sub), n); err != nil {
			return err
		}
	}
	return nil
}

// freezeEntries freezes the entries of dir that are not directories and
// returns the names of those that are.
func freezeEntries(dir string, n *int) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var subdirs []string
	for {
		ents, err := d.ReadDir(dirBatch)
		for _, e := range ents {
			if e.IsDir() {
				subdirs = append(subdirs, e.Name())
				continue
			}
			if _, err := freezeEntry(filepath.Join(dir, e.Name()), n); err != nil {
				return nil, err
			}
		}
		if errors.Is(err, io.EOF) {
			return subdirs, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// freezeEntry makes path root's and read-only, without following a
// symbolic link, counts it in n, and reports whether it is a directory.
func freezeEntry(path string, n *int) (isDir bool, err error) {
	if *n++; *n > maxFreezeEntries {
		return false, fmt.Errorf("the work dir holds more than %d entries after the compile step", maxFreezeEntries)
	}
	if err := os.Lchown(path, 0, 0); err != nil {
		return false, fmt.Errorf("freeze %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return false, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return false, nil
	}
	mode := fs.FileMode(0o444)
	if fi.IsDir() || fi.Mode()&0o100 != 0 {
		mode = 0o555
	}
	// Chmod also clears setuid, setgid and sticky bits.
	if err := os.Chmod(path, mode); err != nil {
		return false, fmt.Errorf("freeze %s: %w", path, err)
	}
	return fi.IsDir(), nil
}

// removeSysVIPC removes every SysV IPC object of the IPC namespace that
// /proc/sysvipc lists, and fails if any is left (a kernel without the
// listing, gVisor's, is checked by count).
func removeSysVIPC() error {
	const ipcRMID = 0
	for _, kind := range []string{"shm", "sem", "msg"} {
		b, err := os.ReadFile("/proc/sysvipc/" + kind)
		if err != nil {
			if n, ok := sysvIPCCount(kind); ok && n > 0 {
				return fmt.Errorf("SysV %s objects left, and the kernel does not list them", kind)
			}
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, line := range lines[1:] {
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			id, err := strconv.Atoi(fields[1])
			if err != nil {
				continue
			}
			var errno syscall.Errno
			switch kind {
			case "shm":
				_, _, errno = syscall.RawSyscall(syscall.SYS_SHMCTL, uintptr(id), ipcRMID, 0)
			case "sem":
				_, _, errno = syscall.RawSyscall6(syscall.SYS_SEMCTL, uintptr(id), 0, ipcRMID, 0, 0, 0)
			case "msg":
				_, _, errno = syscall.RawSyscall(syscall.SYS_MSGCTL, uintptr(id), ipcRMID, 0)
			}
			if errno != 0 && errno != syscall.EINVAL && errno != syscall.EIDRM {
				return fmt.Errorf("remove SysV %s %d: %w", kind, id, errno)
			}
		}
	}
	return nil
}
