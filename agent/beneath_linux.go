//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// File access in a work dir the job has had its hands on (a session's):
// every component is opened relative to its parent's descriptor with
// O_NOFOLLOW, so no symbolic link is ever followed, whatever the job
// swaps in between two calls. Directories are opened without O_DIRECTORY
// and checked with fstat: gVisor follows a link to a directory when
// O_DIRECTORY and O_NOFOLLOW come together (seen with runsc here, and so
// os.Root followed a link to "/" there).

var errLink = errors.New("is a symbolic link or not a directory")

// splitRel splits a clean relative path into its components.
func splitRel(rel string) ([]string, error) {
	rel = path.Clean(strings.TrimPrefix(rel, "./"))
	if rel == "." || rel == "" {
		return nil, nil
	}
	if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("path %q escapes the work dir", rel)
	}
	return strings.Split(rel, "/"), nil
}

// openDirBeneath opens the directory dirs under base, making missing ones
// (owned by uid:gid) when mkdir. The caller closes the descriptor.
func openDirBeneath(base string, dirs []string, mkdir bool, uid, gid int) (int, error) {
	fd, _, err := openDirAt(-100 /* AT_FDCWD */, base)
	if err != nil {
		return -1, err
	}
	for _, d := range dirs {
		next, _, err := openDirAt(fd, d)
		if errors.Is(err, syscall.ENOENT) && mkdir {
			if err = syscall.Mkdirat(fd, d, 0o755); err == nil || errors.Is(err, syscall.EEXIST) {
				next, _, err = openDirAt(fd, d)
				if err == nil {
					_ = syscall.Fchown(next, uid, gid)
				}
			}
		}
		syscall.Close(fd)
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
			return -1, fmt.Errorf("%s %w", d, errLink)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %w", d, err)
		}
		fd = next
	}
	return fd, nil
}

// openDirAt opens name in dirfd as a directory, never through a link, and
// returns its stat.
func openDirAt(dirfd int, name string) (int, syscall.Stat_t, error) {
	var st syscall.Stat_t
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, err
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, st, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		syscall.Close(fd)
		return -1, st, syscall.ENOTDIR
	}
	return fd, st, nil
}

// putBeneath writes data to rel under base, as uid:gid with mode,
// replacing a file (not a directory) there.
func putBeneath(base, rel string, data []byte, mode uint32, uid, gid int) error {
	parts, err := splitRel(rel)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return errors.New("no file name")
	}
	dir, err := openDirBeneath(base, parts[:len(parts)-1], true, uid, gid)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	name := parts[len(parts)-1]
	if err := syscall.Unlinkat(dir, name); err != nil && !errors.Is(err, syscall.ENOENT) {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("%s is a directory", rel)
		}
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	fd, err := syscall.Openat(dir, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode&0o777)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if err := syscall.Fchown(fd, uid, gid); err != nil {
		return err
	}
	if err := syscall.Fchmod(fd, mode&0o777); err != nil {
		return err
	}
	_, err = f.Write(data)
	return err
}

// getBeneath reads the regular file rel under base, at most limit bytes.
func getBeneath(base, rel string, limit int64) ([]byte, os.FileMode, error) {
	parts, err := splitRel(rel)
	if err != nil {
		return nil, 0, err
	}
	if len(parts) == 0 {
		return nil, 0, errors.New("no file name")
	}
	dir, err := openDirBeneath(base, parts[:len(parts)-1], false, 0, 0)
	if err != nil {
		return nil, 0, err
	}
	defer syscall.Close(dir)
	fd, err := syscall.Openat(dir, parts[len(parts)-1], syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, 0, fmt.Errorf("%s is a symbolic link", rel)
	}
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file", rel)
	}
	if fi.Size() > limit {
		return nil, 0, fmt.Errorf("%s is %d bytes; the cap is %d", rel, fi.Size(), limit)
	}
	buf, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(buf)) > limit {
		return nil, 0, fmt.Errorf("%s grew past the cap of %d bytes", rel, limit)
	}
	return buf, fi.Mode(), nil
}

// listBeneath lists dir under base recursively, never following a link,
// within maxEntries entries and the deadline.
func listBeneath(base, dir string, maxEntries int, deadline time.Time) ([]FileInfo, error) {
	parts, err := splitRel(dir)
	if err != nil {
		return nil, err
	}
	fd, err := openDirBeneath(base, parts, false, 0, 0)
	if err != nil {
		return nil, err
	}
	var out []FileInfo
	var walk func(fd int, prefix string, depth int) error
	walk = func(fd int, prefix string, depth int) error {
		f := os.NewFile(uintptr(fd), prefix)
		defer f.Close()
		if depth > 64 {
			return fmt.Errorf("%s: deeper than 64 levels", prefix)
		}
		ents, err := f.ReadDir(-1)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if len(out) >= maxEntries || time.Now().After(deadline) {
				return fmt.Errorf("more than %d entries (or over the time budget): list a subdirectory", maxEntries)
			}
			p := path.Join(prefix, e.Name())
			var st syscall.Stat_t
			if err := fstatat(fd, e.Name(), &st); err != nil {
				continue // gone meanwhile
			}
			isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
			mode := os.FileMode(st.Mode & 0o777)
			switch st.Mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				mode |= os.ModeDir
			case syscall.S_IFLNK:
				mode |= os.ModeSymlink
			case syscall.S_IFIFO:
				mode |= os.ModeNamedPipe
			case syscall.S_IFSOCK:
				mode |= os.ModeSocket
			case syscall.S_IFREG:
			default:
				mode |= os.ModeDevice
			}
			out = append(out, FileInfo{Path: p, Size: st.Size, Dir: isDir, Mode: uint32(mode),
				ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()})
			if isDir {
				sub, _, err := openDirAt(fd, e.Name())
				if err != nil {
					continue // replaced meanwhile
				}
				if err := walk(sub, p, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	prefix := path.Join(parts...)
	if prefix == "" {
		prefix = "."
	}
	err = walk(fd, prefix, 0)
	for i := range out {
		out[i].Path = strings.TrimPrefix(out[i].Path, "./")
	}
	return out, err
}
