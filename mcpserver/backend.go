package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandq/sandq/client"
	"time"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
)

// Backend does what the tools ask, for one caller. Job and session IDs are
// the caller's own (the HTTP API's backend namespaces them per tenant);
// validation errors wrap *jobs.ValidationError, and an error's text is
// what the caller reads.
type Backend interface {
	// Enqueue enqueues job (its ID empty: one is generated) and returns
	// its ID.
	Enqueue(ctx context.Context, job jobs.Job) (string, error)
	// Job reads job id, waiting up to wait for it to end.
	Job(ctx context.Context, id string, wait time.Duration) (jobs.Result, error)
	// Cancel cancels job id.
	Cancel(ctx context.Context, id string) error
	// Artifact returns the artifact name of job id and its bytes, at
	// most max of them (media.ErrTooLarge past it).
	Artifact(ctx context.Context, id, name string, max int64) (jobs.Artifact, []byte, error)
	// OpenSession starts a session and returns its record.
	OpenSession(ctx context.Context, spec jobs.SessionSpec) (jobs.SessionInfo, error)
	// Exec runs a cell in session id.
	Exec(ctx context.Context, id string, cell jobs.Cell) (jobs.CellResult, error)
	// Upload writes a file into session id's work dir.
	Upload(ctx context.Context, id, path string, data []byte) error
	// Download reads a file of session id's work dir.
	Download(ctx context.Context, id, path string) ([]byte, error)
	// Files lists session id's work dir under dir.
	Files(ctx context.Context, id, dir string) ([]jobs.FileEntry, error)
	// CloseSession ends session id and returns its final record.
	CloseSession(ctx context.Context, id string) (jobs.SessionInfo, error)
}

// ClientBackend is a Backend on a client.Client, for an operator's own
// process (`enqueue mcp` over stdio): jobs and sessions are the Tenant's
// (empty: the anonymous tenant), their IDs as stored. It reads jobs by ID
// whatever their tenant, as the CLI does; sessions only of its tenant.
type ClientBackend struct {
	Client *client.Client
	Tenant string
	// ArtifactDir is the local artifact store the workers write (for
	// artifacts that have a path, not a URL).
	ArtifactDir string
}

var _ Backend = (*ClientBackend)(nil)

func (b *ClientBackend) Enqueue(ctx context.Context, job jobs.Job) (string, error) {
	job.Tenant = b.Tenant
	info, err := b.Client.Enqueue(ctx, job)
	if err != nil {
		return "", err
	}
	if info.Existing {
		return "", fmt.Errorf("a job %s exists already (status %s)", info.ID, info.Status)
	}
	return info.ID, nil
}

func (b *ClientBackend) Job(ctx context.Context, id string, wait time.Duration) (jobs.Result, error) {
	if wait <= 0 {
		return b.Client.Get(ctx, id)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := b.Client.Wait(wctx, id)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return b.Client.Get(ctx, id)
	}
	return r, err
}

func (b *ClientBackend) Cancel(ctx context.Context, id string) error { return b.Client.Cancel(ctx, id) }

func (b *ClientBackend) Artifact(ctx context.Context, id, name string, max int64) (jobs.Artifact, []byte, error) {
	r, err := b.Client.Get(ctx, id)
	if err != nil {
		return jobs.Artifact{}, nil, err
	}
	for _, a := range r.Artifacts {
		if a.Name == name {
			data, err := media.Read(ctx, a.URL, b.ArtifactDir, max)
			return a, data, err
		}
	}
	return jobs.Artifact{}, nil, fmt.Errorf("job %s has no artifact %q", id, name)
}

func (b *ClientBackend) OpenSession(ctx context.Context, spec jobs.SessionSpec) (jobs.SessionInfo, error) {
	spec.Tenant = b.Tenant
	sess, err := b.Client.OpenSession(ctx, spec)
	if err != nil {
		return jobs.SessionInfo{}, err
	}
	return sess.Info(ctx)
}

// session returns a handle on the tenant's session id.
func (b *ClientBackend) session(ctx context.Context, id string) (*client.Session, error) {
	info, err := b.Client.SessionInfo(ctx, id)
	if err == nil && info.Tenant != b.Tenant {
		err = fmt.Errorf("session %s: %w", id, jobs.ErrSessionNotFound)
	}
	if err != nil {
		return nil, err
	}
	return b.Client.Session(ctx, id)
}

func (b *ClientBackend) Exec(ctx context.Context, id string, cell jobs.Cell) (jobs.CellResult, error) {
	s, err := b.session(ctx, id)
	if err != nil {
		return jobs.CellResult{}, err
	}
	return s.Exec(ctx, cell)
}

func (b *ClientBackend) Upload(ctx context.Context, id, path string, data []byte) error {
	s, err := b.session(ctx, id)
	if err != nil {
		return err
	}
	return s.Upload(ctx, path, data)
}

func (b *ClientBackend) Download(ctx context.Context, id, path string) ([]byte, error) {
	s, err := b.session(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.Download(ctx, path)
}

func (b *ClientBackend) Files(ctx context.Context, id, dir string) ([]jobs.FileEntry, error) {
	s, err := b.session(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.Files(ctx, dir)
}

func (b *ClientBackend) CloseSession(ctx context.Context, id string) (jobs.SessionInfo, error) {
	s, err := b.session(ctx, id)
	if err != nil {
		return jobs.SessionInfo{}, err
	}
	if err := s.Close(ctx); err != nil {
		return jobs.SessionInfo{}, err
	}
	return s.Info(ctx)
}
