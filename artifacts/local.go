package artifacts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Local is a Store in a directory, for a single machine without S3. URL
// returns the absolute path of the file. Files carry no headers: whoever
// serves them over HTTP must send "Content-Disposition: attachment" for
// what Attachment names.
//
// Reads, listings and deletions go through an os.Root on the directory:
// no key reaches outside it, symbolic links are never followed out of it,
// and only regular files are objects (Get refuses anything else, a
// symbolic link included, as ErrNotFound).
type Local struct {
	root string
}

var _ Store = (*Local)(nil)

// tempPrefix starts the names of Put's temporary files; they are not
// objects, and a sweep removes those older than its cutoff (left by a
// crash) like any file.
const tempPrefix = ".put-"

// NewLocal returns a store under dir, creating it if missing.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("artifacts: local dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("artifacts: local dir: %w", err)
	}
	return &Local{root: abs}, nil
}

// Name implements Store.
func (l *Local) Name() string { return "local" }

func (l *Local) path(key string) (string, error) {
	if !filepath.IsLocal(key) {
		return "", fmt.Errorf("artifacts: bad key %q", key)
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

// name is key as a name inside the os.Root of the store.
func name(key string) (string, error) {
	if !filepath.IsLocal(key) || strings.Contains(key, "\\") {
		return "", fmt.Errorf("artifacts: bad key %q", key)
	}
	return filepath.FromSlash(key), nil
}

// Put implements Store. The file appears whole or not at all.
func (l *Local) Put(_ context.Context, key string, r io.Reader, _ int64, _ string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	// A sweep may remove the directory, left empty, between MkdirAll and
	// CreateTemp: make it again. Once the temporary file is in it, the
	// directory is not empty and stays.
	var tmp *os.File
	for range 3 {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("artifacts: put %s: %w", key, err)
		}
		if tmp, err = os.CreateTemp(filepath.Dir(p), tempPrefix+"*"); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("artifacts: put %s: %w", key, err)
	}
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("artifacts: put %s: %w", key, err)
	}
	return nil
}

// Get implements Store. A key that names no regular file (a directory, a
// symbolic link, a device) is ErrNotFound: the job asked for an object
// that is not there, not a store fault.
func (l *Local) Get(_ context.Context, key string) (io.ReadCloser, error) {
	n, err := name(key)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(l.root)
	if err != nil {
		return nil, fmt.Errorf("artifacts: get %s: %w", key, err)
	}
	defer root.Close()
	notFound := fmt.Errorf("%w: %s", ErrNotFound, key)
	fi, err := root.Lstat(n)
	switch {
	case notThere(err):
		return nil, notFound
	case err != nil:
		return nil, fmt.Errorf("artifacts: get %s: %w", key, err)
	case !fi.Mode().IsRegular():
		return nil, notFound
	}
	f, err := root.Open(n)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, notFound
	case err != nil:
		return nil, fmt.Errorf("artifacts: get %s: %w", key, err)
	}
	// Replaced between Lstat and Open: the opened file is what counts.
	if ofi, err := f.Stat(); err != nil || !ofi.Mode().IsRegular() || !os.SameFile(fi, ofi) {
		f.Close()
		return nil, notFound
	}
	return f, nil
}

// notThere reports whether err says that the key names no file in the
// store: nothing there, a path component that is a file or a symbolic link
// loop, or a symbolic link that leads out of the store's directory.
func notThere(err error) bool {
	var pe *fs.PathError
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) ||
		errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "path escapes") // os.Root's errPathEscapes
}

// URL implements Store: the file's absolute path.
func (l *Local) URL(_ context.Context, key string) (string, error) {
	return l.path(key)
}

// walk calls fn for every regular file under dir, temporary files
// included, with its slash-separated key, and returns the directories
// below dir it saw, parents before children. Symbolic links are neither
// followed nor reported.
func (l *Local) walk(ctx context.Context, root *os.Root, dir string, fn func(key string, fi fs.FileInfo) error) ([]string, error) {
	start := "."
	if d := strings.Trim(dir, "/"); d != "" {
		start = path.Clean(d)
		if !fs.ValidPath(start) || start == "." {
			return nil, fmt.Errorf("artifacts: bad dir %q", dir)
		}
	}
	var dirs []string
	err := fs.WalkDir(root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile, or no dir at all
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if p != start {
				dirs = append(dirs, p)
			}
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return fn(p, fi)
	})
	if err != nil {
		return dirs, fmt.Errorf("artifacts: walk %s: %w", start, err)
	}
	return dirs, nil
}

// List implements Store: the regular files under dir, Put's temporary
// files excepted.
func (l *Local) List(ctx context.Context, dir string, fn func(Object) error) error {
	root, err := os.OpenRoot(l.root)
	if err != nil {
		return fmt.Errorf("artifacts: list: %w", err)
	}
	defer root.Close()
	_, err = l.walk(ctx, root, dir, func(key string, fi fs.FileInfo) error {
		if strings.HasPrefix(path.Base(key), tempPrefix) {
			return nil
		}
		return fn(Object{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
	})
	return err
}

// Delete implements Store. Directories left empty are removed too, up to
// (not including) the store's directory.
func (l *Local) Delete(ctx context.Context, keys ...string) error {
	root, err := os.OpenRoot(l.root)
	if err != nil {
		return fmt.Errorf("artifacts: delete: %w", err)
	}
	defer root.Close()
	var errs []error
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("artifacts: delete: %w", err)
		}
		n, err := name(key)
		if err == nil {
			err = root.Remove(n)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		for d := path.Dir(key); d != "." && d != "/"; d = path.Dir(d) {
			if root.Remove(filepath.FromSlash(d)) != nil {
				break // not empty
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("artifacts: delete: %w", errors.Join(errs...))
	}
	return nil
}

// sweep removes the regular files under dir last modified before cutoff
// (Put's abandoned temporary files too), then the directories below dir
// left empty. It never follows a symbolic link and leaves anything but
// regular files and empty directories alone.
func (l *Local) sweep(ctx context.Context, dir string, cutoff time.Time) (int, error) {
	root, err := os.OpenRoot(l.root)
	if err != nil {
		return 0, fmt.Errorf("artifacts: sweep: %w", err)
	}
	defer root.Close()
	removed, failed := 0, 0
	var first error
	dirs, err := l.walk(ctx, root, dir, func(key string, fi fs.FileInfo) error {
		if !fi.ModTime().Before(cutoff) {
			return nil
		}
		switch err := root.Remove(filepath.FromSlash(key)); {
		case err == nil:
			removed++
		case errors.Is(err, fs.ErrNotExist):
		default:
			failed++
			first = cmp.Or(first, err)
		}
		return nil
	})
	// Children before parents; a directory that is not empty stays.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = root.Remove(filepath.FromSlash(dirs[i]))
	}
	if err != nil {
		return removed, err
	}
	if failed > 0 {
		return removed, fmt.Errorf("artifacts: sweep: %d files not removed, the first: %w", failed, first)
	}
	return removed, nil
}
