//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// writeFiles puts the job's input files into the work dir through an
// os.Root, so no path (or symlink, though none can exist in a scrubbed dir)
// escapes it. Files and the directories made for them belong to the job uid.
func (s *Server) writeFiles(files []File) error {
	if len(files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(s.cfg.WorkDir)
	if err != nil {
		return fmt.Errorf("open work dir: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		name := filepath.Clean(f.Path)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("file %q: path escapes the work dir", f.Path)
		}
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("file %q: %w", f.Path, err)
			}
			for d := dir; d != "."; d = filepath.Dir(d) {
				_ = root.Lchown(d, s.cfg.JobUID, s.cfg.JobGID)
			}
		}
		mode := fs.FileMode(f.Mode & 0o777)
		if mode == 0 {
			mode = 0o644
		}
		fh, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		// Owner and mode (umask-proof) through the descriptor of the file
		// just created: fchown and fchmod, not Root.Chmod's fchmodat2,
		// which gVisor's seccomp filter refuses (EPERM, no fallback).
		_, werr := fh.Write(f.Data)
		oerr := fh.Chown(s.cfg.JobUID, s.cfg.JobGID)
		merr := fh.Chmod(mode)
		cerr := fh.Close()
		if err := errors.Join(werr, oerr, merr, cerr); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
	}
	return nil
}
