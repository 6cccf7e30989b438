package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/jobs"
)

// Sessions: a live interpreter in one container, run cell by cell (see
// jobs.SessionSpec). A session's ID is namespaced per tenant like a job's,
// and its record names its tenant, so another tenant's session is
// NotFound however its ID is spelled.

// sessionRetryAfter is when to try again for want of a session slot.
const sessionRetryAfter = 5 * time.Second

// OpenSession validates spec for c (the policy with c's caps), admits it
// against c's cap of open sessions, claims a free session slot of a live
// worker and starts the session there; it returns the session's record as
// c sees it once the interpreter is ready.
func (s *Service) OpenSession(ctx context.Context, c Caller, spec jobs.SessionSpec) (jobs.SessionInfo, error) {
	if err := c.need(ScopeWrite); err != nil {
		return jobs.SessionInfo{}, err
	}
	if spec.Tenant != "" && !c.raw {
		return jobs.SessionInfo{}, &Error{Kind: Invalid, Msg: "invalid session", Field: "tenant", Detail: "the tenant is the API key's; leave tenant out", Value: spec.Tenant}
	}
	if err := c.checkClientID("session", spec.ID); err != nil {
		return jobs.SessionInfo{}, err
	}
	if err := c.mayReach(spec.Network); err != nil {
		return jobs.SessionInfo{}, err
	}
	id := spec.ID
	if id == "" {
		id = jobs.NewID()
	}
	spec.ID, spec.Tenant = c.StoredID(id), c.Tenant
	if err := s.Policy(c).ValidateSession(&spec); err != nil {
		return jobs.SessionInfo{}, invalid(c, "invalid session", err)
	}
	if err := s.checkEnvironment(ctx, c, "session", spec.Environment, spec.Lang); err != nil {
		return jobs.SessionInfo{}, err
	}
	s.capLimits(spec.Lang, &spec.Limits, c)
	max := s.cfg.MaxSessions
	if c.raw {
		max = 0 // the operator's tools are not counted
	}
	sess, err := s.cfg.StreamClient.OpenSessionWith(ctx, spec, max)
	if _, ok := errors.AsType[*client.QuotaError](err); ok {
		// Sessions that ended without leaving the count (their worker
		// died unseen) stop counting; then the create is tried once more.
		if _, perr := s.st.PruneSessions(ctx, c.Tenant); perr == nil {
			sess, err = s.cfg.StreamClient.OpenSessionWith(ctx, spec, max)
		}
	}
	if q, ok := errors.AsType[*client.QuotaError](err); ok {
		e := newError(TooMany, "the tenant has %d sessions open; the cap is %d: close one first", q.Used, q.Limit)
		e.Quota, e.RetryAfter = QuotaSessions, 5*time.Second
		return jobs.SessionInfo{}, s.refuse(c, e)
	}
	if err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, c, id, err)
	}
	info, err := sess.Info(ctx)
	if err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, c, id, err)
	}
	return c.sessionView(info), nil
}

// Sessions lists c's sessions, newest first, ended ones while their
// records last (an hour).
func (s *Service) Sessions(ctx context.Context, c Caller) ([]jobs.SessionInfo, error) {
	if err := c.need(ScopeRead); err != nil {
		return nil, err
	}
	list, err := s.cfg.Client.Sessions(ctx, c.Tenant)
	if err != nil {
		return nil, unavailable("cannot list the sessions", err)
	}
	out := []jobs.SessionInfo{}
	for _, info := range list {
		out = append(out, c.sessionView(info))
	}
	return out, nil
}

// session returns a handle on c's session id: NotFound when c has none of
// this ID (another tenant's included).
func (s *Service) session(ctx context.Context, c Caller, id, scope string) (*client.Session, error) {
	if err := c.need(scope); err != nil {
		return nil, err
	}
	info, err := s.cfg.Client.SessionInfo(ctx, c.StoredID(id))
	if err == nil && info.Tenant != c.Tenant {
		err = jobs.ErrSessionNotFound
	}
	if err != nil {
		return nil, s.sessionError(ctx, c, id, err)
	}
	return s.cfg.StreamClient.SessionOf(info), nil
}

// SessionInfo reads c's session id's record.
func (s *Service) SessionInfo(ctx context.Context, c Caller, id string) (jobs.SessionInfo, error) {
	sess, err := s.session(ctx, c, id, ScopeRead)
	if err != nil {
		return jobs.SessionInfo{}, err
	}
	return s.info(ctx, c, id, sess)
}

func (s *Service) info(ctx context.Context, c Caller, id string, sess *client.Session) (jobs.SessionInfo, error) {
	info, err := sess.Info(ctx)
	if err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, c, id, err)
	}
	return c.sessionView(info), nil
}

// CloseSession ends c's session id and removes its container; it returns
// the final record. Closing a session that has ended returns its record
// as it is.
func (s *Service) CloseSession(ctx context.Context, c Caller, id string) (jobs.SessionInfo, error) {
	sess, err := s.session(ctx, c, id, ScopeWrite)
	if err != nil {
		return jobs.SessionInfo{}, err
	}
	if err := sess.Close(ctx); err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, c, id, err)
	}
	return s.info(ctx, c, id, sess)
}

// Exec runs a cell in c's session id and returns its result: whatever the
// cell did, a result (status ok, error, timeout, session_ended); errors
// are about the session (Conflict while another cell runs, Gone when the
// session has ended).
func (s *Service) Exec(ctx context.Context, c Caller, id string, cell jobs.Cell) (jobs.CellResult, error) {
	sess, err := s.session(ctx, c, id, ScopeWrite)
	if err != nil {
		return jobs.CellResult{}, err
	}
	if err := s.Policy(c).ValidateCell(&cell); err != nil {
		var ve *jobs.ValidationError
		if errors.As(err, &ve) {
			ve.Field = strings.TrimPrefix(ve.Field, "cell.")
		}
		return jobs.CellResult{}, invalid(c, "invalid request", err)
	}
	r, err := sess.Exec(ctx, cell)
	if err != nil {
		return r, s.sessionError(ctx, c, id, err)
	}
	r.Reason = c.clean(r.Reason)
	return r, nil
}

// Interrupt interrupts the cell c's session id runs, if any; the session
// lives on. It returns the session's record.
func (s *Service) Interrupt(ctx context.Context, c Caller, id string) (jobs.SessionInfo, error) {
	sess, err := s.session(ctx, c, id, ScopeWrite)
	if err != nil {
		return jobs.SessionInfo{}, err
	}
	if err := sess.Interrupt(ctx); err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, c, id, err)
	}
	return s.info(ctx, c, id, sess)
}

// SessionFiles lists c's session id's work dir (dir "" or "."), or a
// directory in it, recursively, sorted by path.
func (s *Service) SessionFiles(ctx context.Context, c Caller, id, dir string) ([]jobs.FileEntry, error) {
	if err := jobs.ValidSessionPath(dir, true); err != nil {
		return nil, invalid(c, "invalid dir", asField(err, ""))
	}
	sess, err := s.session(ctx, c, id, ScopeRead)
	if err != nil {
		return nil, err
	}
	files, err := sess.Files(ctx, dir)
	if err != nil {
		return nil, s.sessionError(ctx, c, id, asField(err, ""))
	}
	if files == nil {
		files = []jobs.FileEntry{}
	}
	return files, nil
}

// Upload writes data to path in c's session id's work dir.
func (s *Service) Upload(ctx context.Context, c Caller, id, path string, data []byte) error {
	if err := jobs.ValidSessionPath(path, false); err != nil {
		return invalid(c, "invalid path", asField(err, ""))
	}
	sess, err := s.session(ctx, c, id, ScopeWrite)
	if err != nil {
		return err
	}
	if err := sess.Upload(ctx, path, data); err != nil {
		return s.sessionError(ctx, c, id, asField(err, ""))
	}
	return nil
}

// Download opens a regular file of c's session id's work dir (up to
// jobs.MaxSessionFileBytes) for the caller to read out, chunk by chunk
// (the rest waits in Redis), then call release: a download holds one of
// the process's MaxDownloads slots (MaxDownloadsPerTenant of c's
// tenant's) until released, so slow readers cannot pile files up.
func (s *Service) Download(ctx context.Context, c Caller, id, path string) (f *client.FileReader, release func(), err error) {
	if err := jobs.ValidSessionPath(path, false); err != nil {
		return nil, nil, invalid(c, "invalid path", asField(err, ""))
	}
	sess, err := s.session(ctx, c, id, ScopeRead)
	if err != nil {
		return nil, nil, err
	}
	release, err = s.downloads.take(c.Tenant)
	if err != nil {
		return nil, nil, err
	}
	f, err = sess.OpenFile(ctx, path)
	if err != nil {
		release()
		return nil, nil, s.sessionError(ctx, c, id, asField(err, ""))
	}
	slot := release
	return f, func() { _ = f.Close(); slot() }, nil
}

// sessionView is info as c sees it: its own ID, its reason without c's ID
// prefix.
func (c Caller) sessionView(info jobs.SessionInfo) jobs.SessionInfo {
	info.ID = c.ClientID(info.ID)
	info.Reason = c.clean(info.Reason)
	return info
}

// asField names the field of a validation error without one (a path
// checked by jobs.ValidSessionPath names "path"): the location the door
// gives says it all.
func asField(err error, field string) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return &jobs.ValidationError{Field: field, Msg: ve.Msg}
	}
	return err
}

// sessionError maps the error of an operation on c's session id (as c
// knows it).
func (s *Service) sessionError(ctx context.Context, c Caller, id string, err error) error {
	var se *jobs.SessionError
	errors.As(err, &se)
	switch {
	case errors.Is(err, jobs.ErrSessionNotFound):
		return newError(NotFound, "no session %s", id)
	case errors.Is(err, jobs.ErrSessionBusy):
		return newError(Conflict, "session %s is running a cell: one runs at a time (interrupt it, or wait for it)", id)
	case errors.Is(err, jobs.ErrSessionExists):
		return newError(Conflict, "the tenant has a session %s (or had one within the last hour)", id)
	case errors.Is(err, jobs.ErrSessionEnded), errors.Is(err, jobs.ErrSessionLost):
		state, reason := jobs.SessionClosed, ""
		if errors.Is(err, jobs.ErrSessionLost) {
			state = jobs.SessionLost
		}
		if se != nil {
			if se.State != "" {
				state = se.State
			}
			reason = c.clean(se.Reason)
		}
		msg := fmt.Sprintf("session %s has ended (%s)", id, state)
		if reason != "" {
			msg += ": " + reason
		}
		return &Error{Kind: Gone, Msg: msg, Where: "session", Field: "state", Detail: reason, Value: state}
	case errors.Is(err, jobs.ErrNoSessionSlots):
		return &Error{Kind: Unavailable, RetryAfter: sessionRetryAfter,
			Msg: "no free session slot: every worker has --max-sessions sessions open, or none takes sessions; retry later"}
	}
	if _, ok := errors.AsType[*jobs.ValidationError](err); ok {
		return invalid(c, "invalid request", err)
	}
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: Timeout, Msg: "the session's worker did not answer in time", Err: errors.New(c.clean(err.Error()))}
	}
	return &Error{Kind: Unavailable, Msg: "the session operation failed", Err: errors.New(c.clean(err.Error()))}
}
