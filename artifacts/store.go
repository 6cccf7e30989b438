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
	"path"
	"strings"
	"time"

	"github.com/sandq/sandq/artifacts/media"
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
	// List calls fn for every object whose key lies under dir ("dir/..."),
	// in no particular order; dir "" lists the whole store. A missing dir
	// (or bucket) lists nothing. An error from fn stops the listing and is
	// returned.
	List(ctx context.Context, dir string, fn func(Object) error) error
	// Delete removes the objects under keys; a missing key is not an
	// error.
	Delete(ctx context.Context, keys ...string) error
}

// Object is one stored object as List reports it.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time // when it was stored (S3 LastModified, a file's mtime)
}

// Attachment reports whether an artifact must be served as a download; see
// media.Attachment.
func Attachment(name, contentType string) bool { return media.Attachment(name, contentType) }

// dirPrefix is dir as a key prefix: "" or "dir/".
func dirPrefix(dir string) string {
	if dir = strings.Trim(dir, "/"); dir == "" {
		return ""
	}
	return dir + "/"
}

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("artifacts: not found")

// DefaultInputsPrefix is the default first part of input file keys; it
// must not overlap the artifact prefix (which the retention sweeper
// empties).
const DefaultInputsPrefix = "sandq-inputs"

// InputKey returns the object key of a job's input file named key
// (files[].key): "<prefix>/tenants/<tenant>/<key>" for a job of a tenant,
// "<prefix>/shared/<key>" for a job without one. A job reads only its own
// tenant's inputs, never another tenant's and never any job's artifacts.
// key must be a clean relative path: no leading "/", no "." or ".."
// component, no empty component; such keys are refused at enqueue, and
// here again.
func InputKey(prefix, tenant, key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || path.Clean(key) != key ||
		key == ".." || strings.HasPrefix(key, "../") || strings.ContainsRune(key, 0) {
		return "", fmt.Errorf("artifacts: bad input key %q", key)
	}
	if strings.ContainsAny(tenant, `/\`) || tenant == "." || tenant == ".." {
		return "", fmt.Errorf("artifacts: bad tenant %q", tenant)
	}
	area := "shared"
	if tenant != "" {
		area = "tenants/" + tenant
	}
	return dirPrefix(prefix) + area + "/" + key, nil
}

// Overlap reports whether two key prefixes share keys: one is empty, they
// are equal, or one is a directory of the other.
func Overlap(a, b string) bool {
	a, b = dirPrefix(a), dirPrefix(b)
	return a == "" || b == "" || strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

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
// application/octet-stream. See media.ContentType.
func ContentType(name string) string { return media.ContentType(name) }

// MaxRetryDelay caps Retry's backoff: a store that comes back is used
// within this long.
const MaxRetryDelay = 5 * time.Second

// Retry calls fn up to attempts times with exponential backoff starting at
// base (capped at MaxRetryDelay), stopping early on success or when ctx
// ends. It returns the last error, annotated with the number of attempts.
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
		delay = min(delay*2, MaxRetryDelay)
	}
	return fmt.Errorf("%w (after %d attempts)", err, attempts)
}
