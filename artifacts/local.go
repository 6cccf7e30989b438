package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Local is a Store in a directory, for a single machine without S3. URL
// returns the absolute path of the file.
type Local struct {
	root string
}

var _ Store = (*Local)(nil)

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

// Put implements Store. The file appears whole or not at all.
func (l *Local) Put(_ context.Context, key string, r io.Reader, _ int64, _ string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("artifacts: put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
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

// Get implements Store.
func (l *Local) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return f, err
}

// URL implements Store: the file's absolute path.
func (l *Local) URL(_ context.Context, key string) (string, error) {
	return l.path(key)
}
