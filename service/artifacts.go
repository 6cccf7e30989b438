package service

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
)

// Artifacts returns c's job id's artifacts (their URLs as stored).
func (s *Service) Artifacts(ctx context.Context, c Caller, id string) ([]jobs.Artifact, error) {
	r, err := s.Job(ctx, c, id, 0)
	if err != nil {
		return nil, err
	}
	return r.Artifacts, nil
}

// Artifact returns c's job id's artifact name: NotFound when the job has
// none of that name. A name whose slashes came escaped and one that came
// as a path are the same name.
func (s *Service) Artifact(ctx context.Context, c Caller, id, name string) (jobs.Artifact, error) {
	arts, err := s.Artifacts(ctx, c, id)
	if err != nil {
		return jobs.Artifact{}, err
	}
	for _, a := range arts {
		if a.Name == name {
			return a, nil
		}
	}
	return jobs.Artifact{}, newError(NotFound, "job %s has no artifact %s", id, strconv.Quote(name))
}

// Remote reports whether a's URL is the S3 store's (a presigned URL to
// redirect to) rather than a path in the local store.
func Remote(a jobs.Artifact) bool {
	return strings.HasPrefix(a.URL, "https://") || strings.HasPrefix(a.URL, "http://")
}

// OpenArtifact opens c's artifact a for reading: from the S3 store, or
// from the local store's directory (nothing outside it). It holds one of
// the process's download slots (of c's tenant's share) until closed.
// NotFound when the local store is not this service's.
func (s *Service) OpenArtifact(ctx context.Context, c Caller, a jobs.Artifact) (io.ReadCloser, error) {
	if !Remote(a) && s.cfg.ArtifactDir == "" {
		return nil, newError(NotFound, "artifact %s is not readable here: this API serves no local artifact directory (--artifact-dir)", strconv.Quote(a.Name))
	}
	release, err := s.downloads.take(c.Tenant)
	if err != nil {
		return nil, err
	}
	rc, err := media.Open(ctx, a.URL, s.cfg.ArtifactDir)
	if err != nil {
		release()
		return nil, &Error{Kind: NotFound, Msg: "artifact " + strconv.Quote(a.Name) + " is not readable here: " + err.Error()}
	}
	return &releasing{ReadCloser: rc, release: release}, nil
}

// releasing gives a download slot back when closed.
type releasing struct {
	io.ReadCloser
	release func()
}

func (r *releasing) Close() error {
	defer r.release()
	return r.ReadCloser.Close()
}

// Size is the artifact's size on disk, when it is a local file; -1 when
// it is not known.
func (r *releasing) Size() int64 {
	if f, ok := r.ReadCloser.(interface{ Stat() (os.FileInfo, error) }); ok {
		if st, err := f.Stat(); err == nil {
			return st.Size()
		}
	}
	return -1
}

// ReadArtifact returns c's job id's artifact name and its bytes, at most
// max of them (TooLarge past it).
func (s *Service) ReadArtifact(ctx context.Context, c Caller, id, name string, max int64) (jobs.Artifact, []byte, error) {
	a, err := s.Artifact(ctx, c, id, name)
	if err != nil {
		return a, nil, err
	}
	release, err := s.downloads.take(c.Tenant)
	if err != nil {
		return a, nil, err
	}
	defer release()
	data, err := media.Read(ctx, a.URL, s.cfg.ArtifactDir, max)
	switch {
	case errors.Is(err, media.ErrTooLarge):
		return a, nil, &Error{Kind: TooLarge, Msg: "artifact " + strconv.Quote(name) + " of job " + id, Err: err}
	case err != nil:
		return a, nil, &Error{Kind: Unavailable, Msg: "artifact " + strconv.Quote(name) + " of job " + id, Err: err}
	}
	return a, data, nil
}
