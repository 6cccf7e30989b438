// Package artifacts stores the files a job produces (plots, requested
// output files) and the files it reads by key. It is the only package that
// talks to S3-compatible storage.
//
// Key layout: <prefix>/<job id>/<name>, where name is the file's path
// relative to the job's work dir ("out/data.csv") or "plots/<file>" for
// captured plots. Two implementations: S3 (minio-go; any S3-compatible
// service, MinIO in the tests) and Local (a directory; the default when no
// endpoint is configured), which returns file paths instead of URLs.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"path"
	"strings"
	"time"
)

// Store keeps artifacts by key.
type Store interface {
	// Put stores size bytes from r under key.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
	// Get opens the object under key. ErrNotFound if there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// URL returns where a client can fetch key: a presigned GET URL for
	// S3, an absolute file path for Local.
	URL(ctx context.Context, key string) (string, error)
	// Name is "s3" or "local".
	Name() string
}

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("artifacts: not found")

// Key returns <prefix>/<jobID>/<name>, with name cleaned; it refuses names
// that would leave the job's prefix.
func Key(prefix, jobID, name string) (string, error) {
	clean := path.Clean("/" + name)[1:]
	if clean == "" || clean != strings.TrimPrefix(name, "./") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("artifacts: bad name %q", name)
	}
	if jobID == "" || strings.ContainsAny(jobID, "/\\") || jobID == "." || jobID == ".." {
		return "", fmt.Errorf("artifacts: bad job id %q", jobID)
	}
	if prefix = strings.Trim(prefix, "/"); prefix == "" {
		return jobID + "/" + clean, nil
	}
	return prefix + "/" + jobID + "/" + clean, nil
}

// ContentType guesses from the name's extension; unknown is
// application/octet-stream.
func ContentType(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".png":
		return "image/png"
	case ".svg":
		return "image/svg+xml"
	case ".html", ".htm":
		return "text/html; charset=utf-8"
	case ".csv":
		return "text/csv; charset=utf-8"
	case ".json":
		return "application/json"
	case ".txt", ".log", ".md":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Retry calls fn up to attempts times with exponential backoff starting at
// base, stopping early on success or when ctx ends. It returns the last
// error, annotated with the number of attempts.
func Retry(ctx context.Context, attempts int, base time.Duration, fn func() error) error {
	var err error
	delay := base
	for i := 1; i <= attempts; i++ {
		if err = fn(); err == nil {
			return nil
		}
		if i == attempts {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %d attempts; %v)", err, i, ctx.Err())
		case <-time.After(delay):
		}
		delay *= 2
	}
	return fmt.Errorf("%w (after %d attempts)", err, attempts)
}
