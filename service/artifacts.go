package service

import (
	"context"
	"errors"
	"io"
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

// OpenArtifact opens a's bytes for reading: from the S3 store, or from the
// local store's directory (nothing outside it). The caller closes it.
// NotFound when the local store is not this service's.
func (s *Service) OpenArtifact(ctx context.Context, a jobs.Artifact) (io.ReadCloser, error) {
	if !Remote(a) && s.cfg.ArtifactDir == "" {
		return nil, newError(NotFound, "artifact %s is not readable here: this API serves no local artifact directory (--artifact-dir)", strconv.Quote(a.Name))
	}
	rc, err := media.Open(ctx, a.URL, s.cfg.ArtifactDir)
	if err != nil {
		return nil, &Error{Kind: NotFound, Msg: "artifact " + strconv.Quote(a.Name) + " is not readable here: " + err.Error()}
	}
	return rc, nil
}

// ReadArtifact returns c's job id's artifact name and its bytes, at most
// max of them (TooLarge past it).
func (s *Service) ReadArtifact(ctx context.Context, c Caller, id, name string, max int64) (jobs.Artifact, []byte, error) {
	a, err := s.Artifact(ctx, c, id, name)
	if err != nil {
		return a, nil, err
	}
	data, err := media.Read(ctx, a.URL, s.cfg.ArtifactDir, max)
	switch {
	case errors.Is(err, media.ErrTooLarge):
		return a, nil, &Error{Kind: TooLarge, Msg: "artifact " + strconv.Quote(name) + " of job " + id, Err: err}
	case err != nil:
		return a, nil, &Error{Kind: Unavailable, Msg: "artifact " + strconv.Quote(name) + " of job " + id, Err: err}
	}
	return a, data, nil
}
