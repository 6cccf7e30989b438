package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandq/sandq/langs/session"
)

// SessionLangs are the languages that have sessions.
func SessionLangs() []string { return session.Langs() }

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
func (c *Client) OpenSession(ctx context.Context, spec SessionSpec) (*Session, error) {
	if err := c.cfg.Policy.ValidateSession(&spec, SessionLangs()); err != nil {
		return nil, err
	}
	spec.ID = cmp.Or(spec.ID, NewID())
	owner, err := c.store.ClaimSessionSlot(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	info := SessionInfo{
		ID: spec.ID, Tenant: spec.Tenant, Lang: spec.Lang, State: SessionStarting, Worker: owner,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(spec.LifetimeSeconds) * time.Second),
		IdleTTLSeconds: spec.IdleTTLSeconds, Limits: spec.Limits,
	}
	created, err := c.store.CreateSession(ctx, info)
	if err != nil || !created {
		_ = c.store.ReleaseSessionSlot(context.WithoutCancel(ctx), owner)
		if err == nil {
			err = &SessionError{Err: ErrSessionExists, ID: spec.ID}
		}
		return nil, err
	}
	timeout := sessionStartTimeout
	if len(spec.Libraries) > 0 {
		timeout = sessionInstallStartTimeout
	}
	s := &Session{c: c, id: spec.ID}
	if _, err := s.command(ctx, owner, SessionCommand{Op: SessionOpCreate, Spec: &spec}, timeout); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrSessionExists: a session of this ID exists (or existed within
// SessionRetention).
var ErrSessionExists = errors.New("a session with this ID exists")

// CreateSession writes a new session's record unless one of its ID
// exists; it reports whether it wrote.
func (s *Store) CreateSession(ctx context.Context, info SessionInfo) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.SessionKey(info.ID), "{}", time.Minute).Result()
	if err != nil || !ok {
		return false, err
	}
	return true, s.PutSession(ctx, info)
}

// Session returns a handle on an existing session (any state), or an error
// wrapping ErrSessionNotFound.
func (c *Client) Session(ctx context.Context, id string) (*Session, error) {
	if _, err := c.SessionInfo(ctx, id); err != nil {
		return nil, err
	}
	return &Session{c: c, id: id}, nil
}

// SessionInfo reads a session's record. A session not yet ended whose
// worker's heartbeat is gone is recorded and returned as lost.
func (c *Client) SessionInfo(ctx context.Context, id string) (SessionInfo, error) {
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
	return c.store.markLost(ctx, info, lostReason(info.Worker))
}

// lostReason is why a session of a worker whose heartbeat is gone is lost.
func lostReason(owner string) string {
	return fmt.Sprintf("its worker %s stopped (no heartbeat for %s)", owner, SessionHeartbeatTTL)
}

// markLost records info as lost, unless it ended meanwhile.
func (s *Store) markLost(ctx context.Context, info SessionInfo, reason string) (SessionInfo, error) {
	cur, err := s.GetSession(ctx, info.ID)
	if err == nil && cur.State.Final() {
		return cur, nil
	}
	info.State, info.Reason, info.EndedAt = SessionLost, reason, time.Now().UTC()
	return info, s.PutSession(ctx, info)
}

// Sessions lists a tenant's sessions ("" is the anonymous tenant), newest
// first, ended ones included while their records last.
func (c *Client) Sessions(ctx context.Context, tenant string) ([]SessionInfo, error) {
	key := c.store.SessionsKey(tenant)
	ids, err := c.rdb.ZRevRange(ctx, key, 0, 999).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	// The records in one MGET, and each live session's worker's
	// heartbeat once per worker, in one pipeline.
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = c.store.SessionKey(id)
	}
	vals, err := c.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	var out []SessionInfo
	var gone []any
	alive := map[string]*redis.IntCmd{}
	for i, v := range vals {
		var info SessionInfo
		raw, ok := v.(string)
		if !ok || json.Unmarshal([]byte(raw), &info) != nil || info.ID == "" {
			if !ok {
				gone = append(gone, ids[i])
			}
			continue // gone, or being created
		}
		if info.Tenant != tenant {
			continue
		}
		if !info.State.Final() && info.Worker != "" {
			alive[info.Worker] = nil
		}
		out = append(out, info)
	}
	if len(gone) > 0 {
		c.rdb.ZRem(ctx, key, gone...)
	}
	if len(alive) == 0 {
		return out, nil
	}
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for owner := range alive {
			alive[owner] = p.Exists(ctx, c.store.SessionHeartbeatKey(owner))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for i, info := range out {
		if hb := alive[info.Worker]; hb != nil && !info.State.Final() && hb.Val() == 0 {
			if out[i], err = c.store.markLost(ctx, info, lostReason(info.Worker)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// command sends cmd to the session's worker and waits for the reply. The
// worker is read from the session's record unless owner is given.
func (s *Session) command(ctx context.Context, owner string, cmd SessionCommand, timeout time.Duration) (SessionReply, error) {
	var info SessionInfo
	if owner == "" {
		var err error
		if info, err = s.c.SessionInfo(ctx, s.id); err != nil {
			return SessionReply{}, err
		}
		if info.State.Final() {
			return SessionReply{}, endedErr(info)
		}
		owner = info.Worker
	}
	cmd.ReqID, cmd.Session = NewID(), s.id
	cmd.Deadline = time.Now().Add(timeout)
	if err := s.c.store.SendSessionCommand(ctx, owner, cmd); err != nil {
		return SessionReply{}, err
	}
	r, err := s.c.store.awaitReply(ctx, owner, cmd.ReqID, cmd.Deadline)
	if errors.Is(err, errWorkerGone) {
		if info.ID == "" {
			info, _ = s.c.store.GetSession(context.WithoutCancel(ctx), s.id)
		}
		info, _ = s.c.store.markLost(context.WithoutCancel(ctx), info, lostReason(owner))
		return SessionReply{}, &SessionError{Err: ErrSessionLost, ID: s.id, State: SessionLost, Reason: info.Reason}
	}
	if err != nil {
		return SessionReply{}, err
	}
	if r.Error != "" {
		return r, replyErr(s.id, r)
	}
	return r, nil
}

func endedErr(info SessionInfo) error {
	base := ErrSessionEnded
	if info.State == SessionLost {
		base = ErrSessionLost
	}
	return &SessionError{Err: base, ID: info.ID, State: info.State, Reason: info.Reason}
}

func replyErr(id string, r SessionReply) error {
	e := &SessionError{ID: id, Reason: r.Error}
	if r.Info != nil {
		e.State = r.Info.State
	}
	switch r.Code {
	case ReplyNotFound:
		e.Err = ErrSessionNotFound
	case ReplyBusy:
		e.Err, e.Reason = ErrSessionBusy, ""
	case ReplyEnded:
		e.Err = ErrSessionEnded
	case ReplyLost:
		e.Err = ErrSessionLost
	case ReplyFull:
		e.Err = ErrNoSessionSlots
	case ReplyInvalid:
		return &ValidationError{Field: "", Msg: r.Error}
	default:
		return fmt.Errorf("session %s: worker: %s", id, r.Error)
	}
	return e
}

// Exec runs a cell and returns its result. A cell that fails, times out or
// ends the session is a result, not an error; errors are about the
// session (ErrSessionBusy, ErrSessionEnded, ErrSessionLost) or Redis.
func (s *Session) Exec(ctx context.Context, cell Cell) (CellResult, error) {
	if cell.ID == "" {
		cell.ID = NewID()[:12]
	} else if msg := checkName(cell.ID, 64); msg != "" {
		return CellResult{}, invalid("cell.id", "%s", msg)
	}
	if int64(len(cell.Code)) > s.c.cfg.Policy.MaxCodeBytes {
		return CellResult{}, invalid("code", "is %d bytes; the cap is %s", len(cell.Code), formatSize(s.c.cfg.Policy.MaxCodeBytes))
	}
	if cell.TimeoutMS < 0 || cell.TimeoutMS > s.c.cfg.Policy.MaxLimits.TimeoutMS {
		return CellResult{}, invalid("timeout_ms", "%d is outside 0..%d", cell.TimeoutMS, s.c.cfg.Policy.MaxLimits.TimeoutMS)
	}
	timeout := time.Duration(cmp.Or(cell.TimeoutMS, s.c.cfg.Policy.MaxLimits.TimeoutMS)) * time.Millisecond
	r, err := s.command(ctx, "", SessionCommand{Op: SessionOpExec, Cell: &cell}, timeout+sessionReplySlack)
	if err != nil {
		return CellResult{}, err
	}
	if r.Cell == nil {
		return CellResult{}, fmt.Errorf("session %s: the worker's reply has no cell result", s.id)
	}
	return *r.Cell, nil
}

// Interrupt interrupts the running cell, if any (KeyboardInterrupt in
// Python).
func (s *Session) Interrupt(ctx context.Context) error {
	_, err := s.command(ctx, "", SessionCommand{Op: SessionOpInterrupt}, sessionOpTimeout)
	return err
}

// Upload writes data to path in the session's work dir (directories made
// as needed), at most MaxSessionFileBytes.
func (s *Session) Upload(ctx context.Context, path string, data []byte) error {
	if err := ValidSessionPath(path, false); err != nil {
		return err
	}
	if int64(len(data)) > MaxSessionFileBytes {
		return invalid("data", "is %d bytes; the cap is %s", len(data), formatSize(MaxSessionFileBytes))
	}
	_, err := s.command(ctx, "", SessionCommand{Op: SessionOpUpload, Path: path, Data: data}, sessionOpTimeout)
	return err
}

// Download reads a regular file of the session's work dir.
func (s *Session) Download(ctx context.Context, path string) ([]byte, error) {
	if err := ValidSessionPath(path, false); err != nil {
		return nil, err
	}
	r, err := s.command(ctx, "", SessionCommand{Op: SessionOpDownload, Path: path}, sessionOpTimeout)
	return r.Data, err
}

// Files lists the work dir (dir "" or "."), or a directory in it,
// recursively, sorted by path.
func (s *Session) Files(ctx context.Context, dir string) ([]FileEntry, error) {
	if err := ValidSessionPath(dir, true); err != nil {
		return nil, err
	}
	r, err := s.command(ctx, "", SessionCommand{Op: SessionOpFiles, Path: dir}, sessionOpTimeout)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(r.Files, func(a, b FileEntry) int { return cmp.Compare(a.Path, b.Path) })
	return r.Files, nil
}

// Close ends the session and removes its container. Closing an ended
// session is not an error.
func (s *Session) Close(ctx context.Context) error {
	_, err := s.command(ctx, "", SessionCommand{Op: SessionOpClose}, sessionOpTimeout)
	if errors.Is(err, ErrSessionEnded) || errors.Is(err, ErrSessionLost) {
		return nil
	}
	return err
}

// Info reads the session's record (see Client.SessionInfo).
func (s *Session) Info(ctx context.Context) (SessionInfo, error) { return s.c.SessionInfo(ctx, s.id) }
