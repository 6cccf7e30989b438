package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sessions: a live interpreter in one container, run cell by cell.
//
// Routing is not asynq. In Redis (prefix P):
//   - P:sess-slots, a hash: worker owner → free session slots. A worker
//     sets its count when it starts and adds one back when a session ends;
//     a create claims a slot atomically (sessionClaim), from the worker
//     with most free slots whose heartbeat is current, dropping the
//     entries of workers whose heartbeat is gone.
//   - P:sess-worker:<owner>, the heartbeat: a key with a short TTL
//     (SessionHeartbeatTTL), refreshed by the worker every third of it.
//   - P:sess-cmds:<owner>, a list of SessionCommand: the worker reads it
//     with a blocking pop. Each command names a reply list,
//     P:sess-reply:<request id>, where the worker pushes one
//     SessionReply (kept a minute).
//   - P:session:<id>, the SessionInfo JSON, with a TTL: the session's
//     lifetime plus SessionRetention, refreshed by the worker.
//   - P:sessions:<tenant>, a sorted set of the tenant's session IDs by
//     creation time ("_" for the anonymous tenant), for listing.
//
// A session whose worker's heartbeat is gone reads as lost (and is
// recorded so) within SessionHeartbeatTTL plus the reader's own check
// interval.

// SessionState is where a session is in its life.
type SessionState string

const (
	SessionStarting SessionState = "starting" // claimed, the container is starting
	SessionReady    SessionState = "ready"    // waiting for a cell
	SessionClosed   SessionState = "closed"   // closed by its owner, or at shutdown
	SessionExpired  SessionState = "expired"  // idle TTL or lifetime reached
	SessionLost     SessionState = "lost"     // the interpreter or its worker died
	SessionOOM      SessionState = "oom"      // the interpreter was killed for memory
)

// Final reports whether s is an end state.
func (s SessionState) Final() bool {
	switch s {
	case SessionClosed, SessionExpired, SessionLost, SessionOOM:
		return true
	}
	return false
}

// Session defaults and bounds.
const (
	DefaultSessionIdleTTL  = 10 * time.Minute
	DefaultSessionLifetime = time.Hour
	MaxSessionLifetime     = 24 * time.Hour
	// SessionRetention is how long an ended session's record stays.
	SessionRetention = time.Hour
	// SessionHeartbeatTTL is the life of a worker's session heartbeat.
	SessionHeartbeatTTL = 6 * time.Second
	// MaxSessionFileBytes caps one uploaded or downloaded file.
	MaxSessionFileBytes = 16 * MiB
)

// SessionSpec is what a session is created with.
type SessionSpec struct {
	// ID is optional; one is generated. Same charset as a job ID.
	ID string `json:"id,omitempty"`
	// Lang must have a session driver: python, javascript, r or bash.
	Lang string `json:"lang"`
	// Limits bound the container, as a job's; TimeoutMS is each cell's
	// default timeout.
	Limits Limits `json:"limits,omitzero"`
	// Libraries are installed before the interpreter starts, as a job's.
	Libraries []string `json:"libraries,omitempty"`
	// Files are written into the work dir before the interpreter starts
	// (inline content only; upload more later).
	Files []File `json:"files,omitempty"`
	// Env is added to the interpreter's environment.
	Env map[string]string `json:"env,omitempty"`
	// Tenant owns the session; only its own callers may reach it.
	Tenant string `json:"tenant,omitempty"`
	// IdleTTLSeconds closes the session when no cell ran for this long
	// (default 600). LifetimeSeconds closes it this long after creation
	// (default 3600, at most 86400).
	IdleTTLSeconds  int `json:"idle_ttl_seconds,omitempty"`
	LifetimeSeconds int `json:"lifetime_seconds,omitempty"`
}

// SessionInfo is a session's record.
type SessionInfo struct {
	ID     string       `json:"id"`
	Tenant string       `json:"tenant,omitempty"`
	Lang   string       `json:"lang"`
	State  SessionState `json:"state"`
	// Reason says why a session ended (or why it is lost).
	Reason         string    `json:"reason,omitempty"`
	Worker         string    `json:"worker,omitempty"`
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at,omitzero"`
	// ExpiresAt is the end of the lifetime; IdleTTLSeconds applies too.
	ExpiresAt      time.Time `json:"expires_at"`
	EndedAt        time.Time `json:"ended_at,omitzero"`
	IdleTTLSeconds int       `json:"idle_ttl_seconds"`
	Limits         Limits    `json:"limits,omitzero"`
}

// Cell is code to run in a session.
type Cell struct {
	Code string `json:"code"`
	// TimeoutMS bounds the cell (default: the session's limits); at its
	// end the cell is interrupted, and the session kept if the
	// interpreter survives.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// ID names the cell (generated when empty); with Stream, its output is
	// sent live to the stream of ID CellStreamID(session, ID).
	ID     string `json:"id,omitempty"`
	Stream bool   `json:"stream,omitempty"`
}

// CellStreamID is the stream ID ([Client.Stream]) a streamed cell's output
// goes to.
func CellStreamID(session, cell string) string { return session + ".cell." + cell }

// CellStatus is how a cell ended.
type CellStatus string

const (
	CellOK      CellStatus = "ok"      // ran to the end
	CellError   CellStatus = "error"   // raised an error (see CellResult.Error)
	CellTimeout CellStatus = "timeout" // interrupted at its timeout
	// CellSessionEnded: the interpreter died during the cell (OOM, crash,
	// exit); the session is over (SessionState, Reason).
	CellSessionEnded CellStatus = "session_ended"
)

// CellResult is the outcome of one cell.
type CellResult struct {
	ID             string     `json:"id"`
	Status         CellStatus `json:"status"`
	ExecutionCount int        `json:"execution_count,omitempty"`
	Stdout         string     `json:"stdout"`
	Stderr         string     `json:"stderr"`
	// StdoutTruncated / StderrTruncated: the middle was dropped at the
	// output limit.
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
	// Results are the displayed values, in order, as MIME bundles: type
	// to content (binary types such as image/png in base64). A bundle too
	// large to keep inline names its artifact instead ("artifact" key:
	// the artifact's name, "url": its URL or path).
	Results []map[string]string `json:"results,omitempty"`
	Error   *CellErrorInfo      `json:"error,omitempty"`
	// Session is the session's state after the cell; Reason why it ended.
	Session SessionState `json:"session"`
	Reason  string       `json:"reason,omitempty"`
	Usage   Usage        `json:"usage"`
	// Artifacts are results stored in the artifact store (large images).
	Artifacts []Artifact `json:"artifacts,omitempty"`
}

// CellErrorInfo is an error a cell raised.
type CellErrorInfo struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback,omitempty"`
}

// FileEntry is one file or directory of a session's work dir.
type FileEntry struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Dir     bool      `json:"dir,omitempty"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// Session errors. Every error of a session operation that is about the
// session (not Redis) wraps one of these.
var (
	ErrSessionNotFound = errors.New("session not found")
	ErrSessionBusy     = errors.New("session busy: a cell is running")
	ErrSessionEnded    = errors.New("session ended")
	// ErrSessionLost: the session's worker or interpreter died.
	ErrSessionLost = errors.New("session_lost: its worker or interpreter died")
	// ErrNoSessionSlots: every worker has --max-sessions sessions open (or
	// none takes sessions).
	ErrNoSessionSlots = errors.New("no free session slot: every worker is at --max-sessions, or no worker takes sessions")
)

// SessionError is an error about one session, with its state and reason.
type SessionError struct {
	Err    error // one of the ErrSession* values
	ID     string
	State  SessionState
	Reason string
}

func (e *SessionError) Error() string {
	s := fmt.Sprintf("session %s: %v", e.ID, e.Err)
	if e.State != "" && !errors.Is(e.Err, ErrSessionBusy) {
		s += " (" + string(e.State) + ")"
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

func (e *SessionError) Unwrap() error { return e.Err }

// SessionOp is a session command's operation.
type SessionOp string

const (
	SessionOpCreate    SessionOp = "create"
	SessionOpExec      SessionOp = "exec"
	SessionOpInterrupt SessionOp = "interrupt"
	SessionOpUpload    SessionOp = "upload"
	SessionOpDownload  SessionOp = "download"
	SessionOpFiles     SessionOp = "files"
	SessionOpClose     SessionOp = "close"
)

// SessionCommand is a request to a worker (P:sess-cmds:<owner>).
type SessionCommand struct {
	ReqID   string       `json:"req"`
	Op      SessionOp    `json:"op"`
	Session string       `json:"session"`
	Spec    *SessionSpec `json:"spec,omitempty"`
	Cell    *Cell        `json:"cell,omitempty"`
	Path    string       `json:"path,omitempty"`
	Data    []byte       `json:"data,omitempty"`
	// Deadline is when the caller stops waiting for the reply; a worker
	// that reads the command after it drops it.
	Deadline time.Time `json:"deadline"`
}

// SessionReply is a worker's answer (P:sess-reply:<req>).
type SessionReply struct {
	// Error is set when the operation failed; Code names its kind
	// ("not_found", "busy", "ended", "lost", "invalid", "full",
	// "internal").
	Error string       `json:"error,omitempty"`
	Code  string       `json:"code,omitempty"`
	Info  *SessionInfo `json:"info,omitempty"`
	Cell  *CellResult  `json:"cell,omitempty"`
	Data  []byte       `json:"data,omitempty"`
	Files []FileEntry  `json:"files,omitempty"`
}

// Reply codes.
const (
	ReplyNotFound = "not_found"
	ReplyBusy     = "busy"
	ReplyEnded    = "ended"
	ReplyLost     = "lost"
	ReplyInvalid  = "invalid"
	ReplyFull     = "full"
	ReplyInternal = "internal"
)

// Session keys.
func (s *Store) SessionSlotsKey() string                 { return s.prefix + ":sess-slots" }
func (s *Store) SessionHeartbeatKey(owner string) string { return s.prefix + ":sess-worker:" + owner }
func (s *Store) SessionCommandsKey(owner string) string  { return s.prefix + ":sess-cmds:" + owner }
func (s *Store) SessionReplyKey(req string) string       { return s.prefix + ":sess-reply:" + req }
func (s *Store) SessionKey(id string) string             { return s.prefix + ":session:" + id }
func (s *Store) SessionsKey(tenant string) string {
	if tenant == "" {
		tenant = "_"
	}
	return s.prefix + ":sessions:" + tenant
}

// sessionClaim takes a free slot from the live worker with the most:
// KEYS[1] the slots hash; ARGV[1] the heartbeat key prefix. It returns
// the owner, or false.
var sessionClaim = redis.NewScript(`
local all = redis.call('HGETALL', KEYS[1])
local best, bestFree = nil, 0
for i = 1, #all, 2 do
  local owner, free = all[i], tonumber(all[i+1])
  if redis.call('EXISTS', ARGV[1] .. owner) == 0 then
    redis.call('HDEL', KEYS[1], owner)
  elseif free > bestFree then
    best, bestFree = owner, free
  end
end
if best then
  redis.call('HINCRBY', KEYS[1], best, -1)
  return best
end
return false
`)

// ClaimSessionSlot takes a free session slot of a live worker and returns
// its owner ID, or ErrNoSessionSlots.
func (s *Store) ClaimSessionSlot(ctx context.Context) (string, error) {
	owner, err := sessionClaim.Run(ctx, s.rdb, []string{s.SessionSlotsKey()}, s.SessionHeartbeatKey("")).Text()
	if errors.Is(err, redis.Nil) {
		return "", ErrNoSessionSlots
	}
	if err != nil {
		return "", fmt.Errorf("jobs: claim session slot: %w", err)
	}
	return owner, nil
}

// SessionHeartbeat marks owner's session service alive and sets its free
// slot count: always when force (at start), else only when its registry
// entry is gone (a claim dropped it while the heartbeat had lapsed).
func (s *Store) SessionHeartbeat(ctx context.Context, owner string, free int, force bool) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.SessionHeartbeatKey(owner), time.Now().UTC().Format(time.RFC3339Nano), SessionHeartbeatTTL)
		if force {
			p.HSet(ctx, s.SessionSlotsKey(), owner, free)
		} else {
			p.HSetNX(ctx, s.SessionSlotsKey(), owner, free)
		}
		return nil
	})
	return err
}

// ReleaseSessionSlot gives owner's slot back (a session ended).
func (s *Store) ReleaseSessionSlot(ctx context.Context, owner string) error {
	// Only while the worker is registered: a stopped worker's entry is
	// gone for good.
	return releaseSlot.Run(ctx, s.rdb, []string{s.SessionSlotsKey()}, owner).Err()
}

var releaseSlot = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
end
return 0
`)

// SessionServiceGone removes owner from the slot registry and its
// heartbeat: it takes no more sessions.
func (s *Store) SessionServiceGone(ctx context.Context, owner string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, s.SessionSlotsKey(), owner)
		p.Del(ctx, s.SessionHeartbeatKey(owner))
		return nil
	})
	return err
}

// WithdrawSessionSlots removes owner from the slot registry: it takes no
// more sessions, but its heartbeat goes on while it closes its own.
func (s *Store) WithdrawSessionSlots(ctx context.Context, owner string) error {
	return s.rdb.HDel(ctx, s.SessionSlotsKey(), owner).Err()
}

// SessionAlive refreshes owner's heartbeat only.
func (s *Store) SessionAlive(ctx context.Context, owner string) error {
	return s.rdb.Set(ctx, s.SessionHeartbeatKey(owner), time.Now().UTC().Format(time.RFC3339Nano), SessionHeartbeatTTL).Err()
}

// SessionWorkerAlive reports whether owner's session heartbeat is current.
func (s *Store) SessionWorkerAlive(ctx context.Context, owner string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.SessionHeartbeatKey(owner)).Result()
	return n > 0, err
}

// PutSession writes a session's record, kept until its lifetime ends plus
// SessionRetention (or SessionRetention after it ended).
func (s *Store) PutSession(ctx context.Context, info SessionInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	ttl := time.Until(info.ExpiresAt) + SessionRetention
	if info.State.Final() {
		ttl = SessionRetention
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.SessionKey(info.ID), b, max(ttl, time.Second))
		p.ZAdd(ctx, s.SessionsKey(info.Tenant), redis.Z{Score: float64(info.CreatedAt.UnixMilli()), Member: info.ID})
		p.Expire(ctx, s.SessionsKey(info.Tenant), MaxSessionLifetime+SessionRetention)
		return nil
	})
	return err
}

// GetSession reads a session's record, as stored.
func (s *Store) GetSession(ctx context.Context, id string) (SessionInfo, error) {
	b, err := s.rdb.Get(ctx, s.SessionKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return SessionInfo{}, &SessionError{Err: ErrSessionNotFound, ID: id}
	}
	if err != nil {
		return SessionInfo{}, fmt.Errorf("jobs: get session %s: %w", id, err)
	}
	var info SessionInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return SessionInfo{}, fmt.Errorf("jobs: session %s: %w", id, err)
	}
	return info, nil
}

// SendSessionCommand pushes cmd to owner's list.
func (s *Store) SendSessionCommand(ctx context.Context, owner string, cmd SessionCommand) error {
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	return s.rdb.RPush(ctx, s.SessionCommandsKey(owner), b).Err()
}

// NextSessionCommand blocks up to wait for owner's next command; nil when
// none came.
func (s *Store) NextSessionCommand(ctx context.Context, owner string, wait time.Duration) (*SessionCommand, error) {
	res, err := s.rdb.BLPop(ctx, wait, s.SessionCommandsKey(owner)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cmd SessionCommand
	if err := json.Unmarshal([]byte(res[1]), &cmd); err != nil {
		return nil, fmt.Errorf("jobs: session command: %w", err)
	}
	return &cmd, nil
}

// ReplySession pushes a reply for req, kept a minute.
func (s *Store) ReplySession(ctx context.Context, req string, r SessionReply) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.SessionReplyKey(req), b)
		p.Expire(ctx, s.SessionReplyKey(req), time.Minute)
		return nil
	})
	return err
}

// awaitReply waits for req's reply until deadline, checking every
// interval that owner is alive; a dead owner is ErrSessionLost.
func (s *Store) awaitReply(ctx context.Context, owner, req string, deadline time.Time) (SessionReply, error) {
	const check = 2 * time.Second
	for {
		wait := min(time.Until(deadline), check)
		if wait <= 0 {
			return SessionReply{}, fmt.Errorf("jobs: no answer from worker %s in time: %w", owner, context.DeadlineExceeded)
		}
		res, err := s.rdb.BLPop(ctx, max(wait, 10*time.Millisecond), s.SessionReplyKey(req)).Result()
		switch {
		case err == nil:
			var r SessionReply
			if err := json.Unmarshal([]byte(res[1]), &r); err != nil {
				return SessionReply{}, fmt.Errorf("jobs: session reply: %w", err)
			}
			return r, nil
		case !errors.Is(err, redis.Nil):
			if ctx.Err() != nil {
				return SessionReply{}, context.Cause(ctx)
			}
			return SessionReply{}, fmt.Errorf("jobs: await session reply: %w", err)
		}
		if ok, err := s.SessionWorkerAlive(ctx, owner); err == nil && !ok {
			return SessionReply{}, errWorkerGone
		}
	}
}

var errWorkerGone = errors.New("worker gone")

// ValidateSession checks a session spec against p, as Validate checks a
// job, and that the language has a session driver (sessionLangs).
func (p Policy) ValidateSession(s *SessionSpec, sessionLangs []string) error {
	p = p.WithDefaults()
	if s.ID != "" {
		if msg := checkName(s.ID, maxIDBytes); msg != "" {
			return invalid("id", "%s", msg)
		}
	}
	if s.Tenant != "" {
		if msg := checkName(s.Tenant, maxTenantBytes); msg != "" {
			return invalid("tenant", "%s", msg)
		}
	}
	lang, ok := p.lookupLang(s.Lang)
	if !ok {
		return invalid("lang", "unknown language %q; sessions support: %s", s.Lang, strings.Join(sessionLangs, ", "))
	}
	found := false
	for _, l := range sessionLangs {
		found = found || l == lang
	}
	if !found {
		return invalid("lang", "%s has no sessions; sessions support: %s", lang, strings.Join(sessionLangs, ", "))
	}
	s.Lang = lang
	if err := p.validateLimits(&s.Limits); err != nil {
		return err
	}
	for i, f := range s.Files {
		if f.Key != "" {
			return invalid(fmt.Sprintf("files[%d].key", i), "session files are inline (content_b64); upload more with the session's upload")
		}
	}
	if err := p.validateFiles(s.Files); err != nil {
		return err
	}
	if err := p.validateArgsEnv(&Job{Lang: s.Lang, Env: s.Env}); err != nil {
		return err
	}
	if err := p.validateLibraries(s.Lang, s.Libraries); err != nil {
		return err
	}
	if err := p.validateLangOptions(s.Lang, s.Env); err != nil {
		return err
	}
	switch {
	case s.IdleTTLSeconds < 0:
		return invalid("idle_ttl_seconds", "is negative")
	case s.LifetimeSeconds < 0:
		return invalid("lifetime_seconds", "is negative")
	case s.LifetimeSeconds > int(MaxSessionLifetime/time.Second):
		return invalid("lifetime_seconds", "%d exceeds the cap %d", s.LifetimeSeconds, int(MaxSessionLifetime/time.Second))
	}
	if s.IdleTTLSeconds == 0 {
		s.IdleTTLSeconds = int(DefaultSessionIdleTTL / time.Second)
	}
	if s.LifetimeSeconds == 0 {
		s.LifetimeSeconds = int(DefaultSessionLifetime / time.Second)
	}
	s.IdleTTLSeconds = min(s.IdleTTLSeconds, s.LifetimeSeconds)
	return nil
}

// ValidSessionPath checks a path in a session's work dir: relative,
// clean, no "..", no NUL or control characters. "" and "." name the
// work dir itself where allowDir.
func ValidSessionPath(p string, allowDir bool) error {
	if (p == "" || p == ".") && allowDir {
		return nil
	}
	if _, msg := checkRelPath(p, false); msg != "" {
		return invalid("path", "%s", msg)
	}
	return nil
}
