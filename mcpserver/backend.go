package mcpserver

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// Backend does what the tools ask, for one caller. Job and session IDs are
// the caller's own; an error's text is what the caller reads
// (errorText).
type Backend interface {
	// Enqueue enqueues job (its ID empty: one is generated) and returns
	// its ID.
	Enqueue(ctx context.Context, job jobs.Job) (string, error)
	// Job reads job id, waiting up to wait for it to end.
	Job(ctx context.Context, id string, wait time.Duration) (jobs.Result, error)
	// Cancel cancels job id.
	Cancel(ctx context.Context, id string) error
	// Artifact returns the artifact name of job id and its bytes, at
	// most max of them (a TooLarge error past it).
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
	// CreateEnvironment records recipe r as an environment; false when
	// one of that name and recipe existed.
	CreateEnvironment(ctx context.Context, r jobs.Recipe) (service.EnvironmentView, bool, error)
	// Environments lists the environments the caller's jobs may name.
	Environments(ctx context.Context) ([]service.EnvironmentView, error)
	// Environment reads environment name (the shared one when shared).
	Environment(ctx context.Context, name string, shared bool) (service.EnvironmentView, error)
	// DeleteEnvironment deletes environment name (the shared one when
	// shared).
	DeleteEnvironment(ctx context.Context, name string, shared bool) error
}

// ServiceBackend is the Backend of a caller of the service: the request
// key's over HTTP, the operator's (service.Operator) over stdio. Every
// rule (scopes, IDs, caps, quotas) is the service's.
type ServiceBackend struct {
	Service *service.Service
	Caller  service.Caller
}

var _ Backend = ServiceBackend{}

func (b ServiceBackend) Enqueue(ctx context.Context, job jobs.Job) (string, error) {
	id, err := b.Service.SubmitJob(ctx, b.Caller, service.JobRequest{Job: job})
	return b.Caller.ClientID(id), err
}

func (b ServiceBackend) Job(ctx context.Context, id string, wait time.Duration) (jobs.Result, error) {
	return b.Service.Job(ctx, b.Caller, id, wait)
}

func (b ServiceBackend) Cancel(ctx context.Context, id string) error {
	return b.Service.CancelJob(ctx, b.Caller, id)
}

func (b ServiceBackend) Artifact(ctx context.Context, id, name string, max int64) (jobs.Artifact, []byte, error) {
	return b.Service.ReadArtifact(ctx, b.Caller, id, name, max)
}

func (b ServiceBackend) OpenSession(ctx context.Context, spec jobs.SessionSpec) (jobs.SessionInfo, error) {
	return b.Service.OpenSession(ctx, b.Caller, spec)
}

func (b ServiceBackend) Exec(ctx context.Context, id string, cell jobs.Cell) (jobs.CellResult, error) {
	return b.Service.Exec(ctx, b.Caller, id, cell)
}

func (b ServiceBackend) Upload(ctx context.Context, id, path string, data []byte) error {
	return b.Service.Upload(ctx, b.Caller, id, path, data)
}

func (b ServiceBackend) Download(ctx context.Context, id, path string) ([]byte, error) {
	f, release, err := b.Service.Download(ctx, b.Caller, id, path)
	if err != nil {
		return nil, err
	}
	defer release()
	data, err := io.ReadAll(f) // the tool result holds the bytes
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", path, err)
	}
	return data, nil
}

func (b ServiceBackend) Files(ctx context.Context, id, dir string) ([]jobs.FileEntry, error) {
	return b.Service.SessionFiles(ctx, b.Caller, id, dir)
}

func (b ServiceBackend) CloseSession(ctx context.Context, id string) (jobs.SessionInfo, error) {
	return b.Service.CloseSession(ctx, b.Caller, id)
}

func (b ServiceBackend) CreateEnvironment(ctx context.Context, r jobs.Recipe) (service.EnvironmentView, bool, error) {
	return b.Service.CreateEnvironment(ctx, b.Caller, r)
}

func (b ServiceBackend) Environments(ctx context.Context) ([]service.EnvironmentView, error) {
	return b.Service.Environments(ctx, b.Caller)
}

func (b ServiceBackend) Environment(ctx context.Context, name string, shared bool) (service.EnvironmentView, error) {
	return b.Service.Environment(ctx, b.Caller, name, shared)
}

func (b ServiceBackend) DeleteEnvironment(ctx context.Context, name string, shared bool) error {
	return b.Service.DeleteEnvironment(ctx, b.Caller, name, shared)
}
