package client

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Session is a handle on one session. It holds no connection: every call
// is a command to the session's worker and its reply. It is safe for
// concurrent use; the worker runs one cell at a time and answers
// ErrSessionBusy to a second.
type Session struct {
	c  *Client
	id string
}

// ID returns the session's ID.
func (s *Session) ID() string { return s.id }

// sessionStartTimeout bounds a create: a container start, and the
// library installs when the spec has libraries.
const (
	sessionStartTimeout        = 2 * time.Minute
	sessionInstallStartTimeout = 15 * time.Minute
	// sessionReplySlack is added to a cell's timeout for the reply.
	sessionReplySlack = 30 * time.Second
	sessionOpTimeout  = time.Minute
)

// OpenSession validates spec, claims a free session slot of a live
// worker, and creates the session there: the container starts, the
// libraries are installed, the files written and the interpreter started
// before it returns. ErrNoSessionSlots when every worker is full.
func (c *Client) OpenSession(ctx context.Context, spec jobs.SessionSpec) (*Session, error) {
	return c.OpenSessionWith(ctx, spec, 0)
}

// OpenSessionWith is OpenSession with a cap on the sessions not ended of
// the spec's tenant (0: none): past it, a *QuotaError of "sessions". The
// count and the creation are one script, so concurrent creates never pass
// the cap.
func (c *Client) OpenSessionWith(ctx context.Context, spec jobs.SessionSpec, maxLive int) (*Session, error) {
	if err := c.cfg.Policy.ValidateSession(&spec); err != nil {
		return nil, err
	}
	spec.ID = cmp.Or(spec.ID, jobs.NewID())
	now := time.Now().UTC()
	info := jobs.SessionInfo{
		ID: spec.ID, Tenant: spec.Tenant, Lang: spec.Lang, State: jobs.SessionStarting,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(spec.LifetimeSeconds) * time.Second),
		IdleTTLSeconds: spec.IdleTTLSeconds, Limits: spec.Limits,
	}
	created, live, err := c.store.AdmitSession(ctx, info, maxLive)
	switch {
	case err != nil:
		return nil, err
	case live > 0:
		return nil, &QuotaError{Resource: "sessions", Used: int64(live), Limit: int64(maxLive)}
	case !created:
		return nil, &jobs.SessionError{Err: jobs.ErrSessionExists, ID: spec.ID}
	}
	owner, err := c.store.ClaimSessionSlot(ctx)
	if err != nil {
		_ = c.store.DropSession(context.WithoutCancel(ctx), spec.ID, spec.Tenant)
		return nil, err
	}
	info.Worker = owner
	if err := c.store.PutSession(ctx, info); err != nil {
		_ = c.store.ReleaseSessionSlot(context.WithoutCancel(ctx), owner)
		_ = c.store.DropSession(context.WithoutCancel(ctx), spec.ID, spec.Tenant)
		return nil, err
	}
	timeout := sessionStartTimeout
	if len(spec.Libraries) > 0 {
		timeout = sessionInstallStartTimeout
	}
	s := &Session{c: c, id: spec.ID}
	if _, err := s.command(ctx, owner, store.SessionCommand{Op: store.SessionOpCreate, Spec: &spec}, timeout); err != nil {
		return nil, err
	}
	return s, nil
}

// Session returns a handle on an existing session (any state), or an error
// wrapping ErrSessionNotFound.
func (c *Client) Session(ctx context.Context, id string) (*Session, error) {
	if _, err := c.SessionInfo(ctx, id); err != nil {
		return nil, err
	}
	return &Session{c: c, id: id}, nil
}

// SessionOf returns a handle on the session whose record the caller has
// just read (SessionInfo), without reading it again.
func (c *Client) SessionOf(info jobs.SessionInfo) *Session { return &Session{c: c, id: info.ID} }

// SessionInfo reads a session's record. A session not yet ended whose
// worker's heartbeat is gone is recorded and returned as lost.
func (c *Client) SessionInfo(ctx context.Context, id string) (jobs.SessionInfo, error) {
	info, err := c.store.GetSession(ctx, id)
	if err != nil {
		return info, err
	}
	if info.State.Final() || info.Worker == "" {
		return info, nil
	}
	alive, err := c.store.SessionWorkerAlive(ctx, info.Worker)
	if err != nil || alive {
		return info, err
	}
	return c.store.MarkLost(ctx, info, store.LostReason(info.Worker))
}

// Sessions lists a tenant's sessions ("" is the anonymous tenant), newest
// first (the newest 1,000), ended ones included while their records last.
// A session not ended whose worker's heartbeat is gone is recorded and
// returned as lost.
func (c *Client) Sessions(ctx context.Context, tenant string) ([]jobs.SessionInfo, error) {
	return c.store.ListSessions(ctx, tenant, 1000)
}

// command sends cmd to the session's worker and waits for the reply. The
// worker is read from the session's record unless owner is given.
func (s *Session) command(ctx context.Context, owner string, cmd store.SessionCommand, timeout time.Duration) (store.SessionReply, error) {
	r, _, err := s.exchange(ctx, owner, &cmd, timeout)
	return r, err
}

// exchange is command, leaving in cmd its request ID and deadline, and
// returning the worker it was sent to (for a reply in several parts).
func (s *Session) exchange(ctx context.Context, owner string, cmd *store.SessionCommand, timeout time.Duration) (store.SessionReply, string, error) {
	cmd.ReqID, cmd.Session = jobs.NewID(), s.id
	cmd.Deadline = time.Now().Add(timeout)
	var info jobs.SessionInfo
	if owner == "" {
		// The record, its worker's heartbeat and the send: one round trip.
		var sent, alive bool
		var err error
		if info, sent, alive, err = s.c.store.SendToSession(ctx, *cmd); err != nil {
			return store.SessionReply{}, "", err
		}
		if !alive {
			if info, err = s.c.store.MarkLost(ctx, info, store.LostReason(info.Worker)); err != nil {
				return store.SessionReply{}, "", err
			}
		}
		if !sent {
			return store.SessionReply{}, "", endedErr(info)
		}
		owner = info.Worker
	} else if err := s.c.store.SendSessionCommand(ctx, owner, *cmd); err != nil {
		return store.SessionReply{}, owner, err
	}
	r, err := s.await(ctx, info, owner, *cmd)
	return r, owner, err
}

// await reads the next reply to cmd, sent to owner.
func (s *Session) await(ctx context.Context, info jobs.SessionInfo, owner string, cmd store.SessionCommand) (store.SessionReply, error) {
	r, err := s.c.store.AwaitReply(ctx, owner, cmd.ReqID, cmd.Deadline)
	if errors.Is(err, store.ErrWorkerGone) {
		if info.ID == "" {
			info, _ = s.c.store.GetSession(context.WithoutCancel(ctx), s.id)
		}
		info, _ = s.c.store.MarkLost(context.WithoutCancel(ctx), info, store.LostReason(owner))
		return store.SessionReply{}, &jobs.SessionError{Err: jobs.ErrSessionLost, ID: s.id, State: jobs.SessionLost, Reason: info.Reason}
	}
	if err != nil {
		return store.SessionReply{}, err
	}
	if r.Error != "" {
		return r, replyErr(s.id, r)
	}
	return r, nil
}

func endedErr(info jobs.SessionInfo) error {
	base := jobs.ErrSessionEnded
	if info.State == jobs.SessionLost {
		base = jobs.ErrSessionLost
	}
	return &jobs.SessionError{Err: base, ID: info.ID, State: info.State, Reason: info.Reason}
}

func replyErr(id string, r store.SessionReply) error {
	e := &jobs.SessionError{ID: id, Reason: r.Error}
	if r.Info != nil {
		e.State = r.Info.State
	}
	switch r.Code {
	case store.ReplyNotFound:
		e.Err = jobs.ErrSessionNotFound
	case store.ReplyBusy:
		e.Err, e.Reason = jobs.ErrSessionBusy, ""
	case store.ReplyEnded:
		e.Err = jobs.ErrSessionEnded
	case store.ReplyLost:
		e.Err = jobs.ErrSessionLost
	case store.ReplyFull:
		e.Err = jobs.ErrNoSessionSlots
	case store.ReplyInvalid:
		return &jobs.ValidationError{Field: "", Msg: r.Error}
	default:
		return fmt.Errorf("session %s: worker: %s", id, r.Error)
	}
	return e
}

// Exec runs a cell and returns its result. A cell that fails, times out or
// ends the session is a result, not an error; errors are about the
// session (ErrSessionBusy, ErrSessionEnded, ErrSessionLost) or Redis.
func (s *Session) Exec(ctx context.Context, cell jobs.Cell) (jobs.CellResult, error) {
	if err := s.c.cfg.Policy.ValidateCell(&cell); err != nil {
		return jobs.CellResult{}, err
	}
	if cell.ID == "" {
		cell.ID = jobs.NewID()[:12]
	}
	timeout := time.Duration(cmp.Or(cell.TimeoutMS, s.c.cfg.Policy.MaxLimits.TimeoutMS)) * time.Millisecond
	r, err := s.command(ctx, "", store.SessionCommand{Op: store.SessionOpExec, Cell: &cell}, timeout+sessionReplySlack)
	if err != nil {
		return jobs.CellResult{}, err
	}
	if r.Cell == nil {
		return jobs.CellResult{}, fmt.Errorf("session %s: the worker's reply has no cell result", s.id)
	}
	return *r.Cell, nil
}

// Interrupt interrupts the running cell, if any (KeyboardInterrupt in
// Python).
func (s *Session) Interrupt(ctx context.Context) error {
	_, err := s.command(ctx, "", store.SessionCommand{Op: store.SessionOpInterrupt}, sessionOpTimeout)
	return err
}

// Upload writes data to path in the session's work dir (directories made
// as needed), at most MaxSessionFileBytes.
func (s *Session) Upload(ctx context.Context, path string, data []byte) error {
	if err := jobs.ValidSessionPath(path, false); err != nil {
		return err
	}
	if err := jobs.ValidateSessionFile(data); err != nil {
		return err
	}
	_, err := s.command(ctx, "", store.SessionCommand{Op: store.SessionOpUpload, Path: path, Data: data}, sessionOpTimeout)
	return err
}

// Download reads a regular file of the session's work dir.
func (s *Session) Download(ctx context.Context, path string) ([]byte, error) {
	f, err := s.OpenFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, 0, f.Size())
	buf := bytes.NewBuffer(data)
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

// OpenFile starts reading a regular file of the session's work dir. The
// worker sends it in chunks (store.SessionChunkBytes) that wait in Redis
// until read: the reader holds one at a time. Close it.
func (s *Session) OpenFile(ctx context.Context, path string) (*FileReader, error) {
	if err := jobs.ValidSessionPath(path, false); err != nil {
		return nil, err
	}
	cmd := store.SessionCommand{Op: store.SessionOpDownload, Path: path}
	r, owner, err := s.exchange(ctx, "", &cmd, sessionOpTimeout)
	if err != nil {
		return nil, err
	}
	return &FileReader{s: s, ctx: ctx, owner: owner, cmd: cmd, size: r.Size, chunk: r.Data, more: r.More}, nil
}

// FileReader reads a session file chunk by chunk (Session.OpenFile).
type FileReader struct {
	s     *Session
	ctx   context.Context
	owner string
	cmd   store.SessionCommand
	size  int64
	chunk []byte
	more  bool
	err   error
}

// Size is the file's size.
func (f *FileReader) Size() int64 { return f.size }

func (f *FileReader) Read(p []byte) (int, error) {
	for len(f.chunk) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if !f.more {
			return 0, io.EOF
		}
		r, err := f.s.await(f.ctx, jobs.SessionInfo{}, f.owner, f.cmd)
		if err != nil {
			f.err = fmt.Errorf("session %s: download: %w", f.s.id, err)
			return 0, f.err
		}
		f.chunk, f.more = r.Data, r.More
	}
	n := copy(p, f.chunk)
	f.chunk = f.chunk[n:]
	return n, nil
}

// Close drops what is left of the file in Redis.
func (f *FileReader) Close() error {
	if f.more {
		f.more = false
		return f.s.c.store.DropReplies(context.WithoutCancel(f.ctx), f.cmd.ReqID)
	}
	return nil
}

// Files lists the work dir (dir "" or "."), or a directory in it,
// recursively, sorted by path.
func (s *Session) Files(ctx context.Context, dir string) ([]jobs.FileEntry, error) {
	if err := jobs.ValidSessionPath(dir, true); err != nil {
		return nil, err
	}
	r, err := s.command(ctx, "", store.SessionCommand{Op: store.SessionOpFiles, Path: dir}, sessionOpTimeout)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(r.Files, func(a, b jobs.FileEntry) int { return cmp.Compare(a.Path, b.Path) })
	return r.Files, nil
}

// Close ends the session and removes its container. Closing an ended
// session is not an error.
func (s *Session) Close(ctx context.Context) error {
	_, err := s.command(ctx, "", store.SessionCommand{Op: store.SessionOpClose}, sessionOpTimeout)
	if errors.Is(err, jobs.ErrSessionEnded) || errors.Is(err, jobs.ErrSessionLost) {
		return nil
	}
	return err
}

// Info reads the session's record (see Client.SessionInfo).
func (s *Session) Info(ctx context.Context) (jobs.SessionInfo, error) {
	return s.c.SessionInfo(ctx, s.id)
}
