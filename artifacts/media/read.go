package media

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// OpenLocal opens a file of the local artifact store dir by the path a
// Result names, through os.Root: nothing outside dir, no link followed out
// of it, regular files only.
func OpenLocal(dir, path string) (*os.File, error) {
	if dir == "" {
		return nil, errors.New("no local artifact directory is configured (--artifact-dir)")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, errors.New("outside the artifact directory")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("not a regular file")
	}
	return f, nil
}

// ErrTooLarge is Read's error for an artifact over its cap.
var ErrTooLarge = errors.New("artifact larger than the cap")

// fetchClient fetches presigned URLs: a store that does not answer in a
// minute is down.
var fetchClient = &http.Client{Timeout: time.Minute}

// Open opens an artifact for reading: from the S3 store by its presigned
// URL (http or https; a store that does not answer in a minute is down),
// or from the local store dir by its path (OpenLocal). The caller closes
// it.
func Open(ctx context.Context, url, localDir string) (io.ReadCloser, error) {
	if strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://") {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := fetchClient.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("the store answered %s", resp.Status)
		}
		return resp.Body, nil
	}
	return OpenLocal(localDir, url)
}

// Read returns an artifact's bytes (see Open), at most max of them
// (ErrTooLarge past it).
func Read(ctx context.Context, url, localDir string, max int64) ([]byte, error) {
	src, err := Open(ctx, url, localDir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	data, err := io.ReadAll(io.LimitReader(src, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w (%d bytes)", ErrTooLarge, max)
	}
	return data, nil
}
