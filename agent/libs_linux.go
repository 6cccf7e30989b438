//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Budgets of the volume measure: an install's package scripts may fill
// the set's directory with anything.
const (
	libsMaxEntries = 1_000_000
	libsMeasure    = 2 * time.Minute
)

// prepareLibs makes the volume root root's own, 0755, and the set's
// directory the job uid's, before the install's steps.
func (s *Server) prepareLibs(l *Libs) error {
	if !filepath.IsAbs(l.Root) || !filepath.IsAbs(l.Dir) || filepath.Dir(l.Dir) != filepath.Clean(l.Root) {
		return fmt.Errorf("libs: %s is not a directory of %s", l.Dir, l.Root)
	}
	if err := os.Lchown(l.Root, 0, 0); err != nil {
		return fmt.Errorf("libs: %w", err)
	}
	if err := os.Chmod(l.Root, 0o755); err != nil {
		return fmt.Errorf("libs: %w", err)
	}
	if err := os.Mkdir(l.Dir, 0o755); err != nil {
		return fmt.Errorf("libs: %w", err)
	}
	return os.Lchown(l.Dir, s.cfg.JobUID, s.cfg.JobGID)
}

// commitLibs measures the volume and links the set, when ok (every step
// succeeded); otherwise, or when it is over the cap, it removes the set's
// directory.
func (s *Server) commitLibs(l *Libs, ok bool) *LibsResult {
	res := &LibsResult{}
	fail := func(format string, args ...any) *LibsResult {
		res.Error = fmt.Sprintf(format, args...)
		_ = os.RemoveAll(l.Dir)
		return res
	}
	if !ok {
		return fail("a step failed")
	}
	n, err := volumeBytes(l.Root)
	res.Bytes = n
	switch {
	case err != nil:
		return fail("measure %s: %v", l.Root, err)
	case l.MaxBytes > 0 && n > l.MaxBytes:
		return fail("the installed libraries take %d KiB on disk, over the cap of %d KiB", n>>10, l.MaxBytes>>10)
	}
	name := filepath.Base(l.Dir)
	if err := os.Symlink(name, l.Link); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fail("link %s: %v", l.Link, err)
		}
		_ = os.RemoveAll(l.Dir) // another install linked first: its set stays
	}
	got, err := os.Readlink(l.Link)
	if err != nil {
		return fail("read %s: %v", l.Link, err)
	}
	res.Linked = got
	return res
}

// volumeBytes is the space the files under root take (allocated blocks),
// links and directories included, within budgets of entries and time.
func volumeBytes(root string) (int64, error) {
	var n, entries int64
	deadline := time.Now().Add(libsMeasure)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if entries++; entries > libsMaxEntries {
			return fmt.Errorf("over %d files", libsMaxEntries)
		}
		if entries%1024 == 0 && time.Now().After(deadline) {
			return fmt.Errorf("not measured within %s", libsMeasure)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	return n, err
}
