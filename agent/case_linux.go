package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// freshCase readies the container for a test case.
func (s *Server) freshCase() error {
	if s.pre != nil {
		s.dropPrestart() // a case runs cold: the fork server would outlive it
	}
	if left := s.killOthers(); len(left) > 0 {
		return fmt.Errorf("processes survive SIGKILL: %v", left)
	}
	var errs []error
	for _, dir := range s.cfg.ScrubDirs {
		if dir == s.cfg.WorkDir {
			continue
		}
		if err := emptyDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
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
	return errors.Join(errs...)
}

// freeze makes dir and everything under it root's, with no write bit:
// directories 0555, files readable by all and executable by all when
// their owner could execute them. Symbolic links are not followed.
func freeze(dir string) error {
	n := 0
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxFreezeEntries {
			return fmt.Errorf("the work dir holds more than %d entries after the compile step", maxFreezeEntries)
		}
		if err := os.Lchown(path, 0, 0); err != nil {
			return fmt.Errorf("freeze %s: %w", path, err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o444)
		if fi.IsDir() || fi.Mode()&0o100 != 0 {
			mode = 0o555
		}
		// Chmod also clears setuid, setgid and sticky bits.
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("freeze %s: %w", path, err)
		}
		return nil
	})
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
