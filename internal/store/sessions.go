package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandq/sandq/jobs"
)

// Sessions: a live interpreter in one container, run cell by cell.
// Routing is not asynq: a create claims a free slot of a live worker
// (SessionSlotsKey, atomically, from the worker with most free slots whose
// heartbeat is current, dropping the entries of workers whose heartbeat is
// gone); every command goes to the worker's list (SessionCommandsKey),
// which it reads with a blocking pop, and names a reply list
// (SessionReplyKey) where the worker pushes one reply. A session whose
// worker's heartbeat is gone reads as lost (and is recorded so) within
// SessionHeartbeatTTL plus the reader's own check interval.

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
	ReqID   string            `json:"req"`
	Op      SessionOp         `json:"op"`
	Session string            `json:"session"`
	Spec    *jobs.SessionSpec `json:"spec,omitempty"`
	Cell    *jobs.Cell        `json:"cell,omitempty"`
	Path    string            `json:"path,omitempty"`
	Data    []byte            `json:"data,omitempty"`
	// Deadline is when the caller stops waiting for the reply; a worker
	// that reads the command after it drops it.
	Deadline time.Time `json:"deadline"`
}

// SessionReply is a worker's answer (P:sess-reply:<req>).
type SessionReply struct {
	// Error is set when the operation failed; Code names its kind
	// ("not_found", "busy", "ended", "lost", "invalid", "full",
	// "internal").
	Error string            `json:"error,omitempty"`
	Code  string            `json:"code,omitempty"`
	Info  *jobs.SessionInfo `json:"info,omitempty"`
	Cell  *jobs.CellResult  `json:"cell,omitempty"`
	Data  []byte            `json:"data,omitempty"`
	Files []jobs.FileEntry  `json:"files,omitempty"`
	// A download comes in chunks of at most SessionChunkBytes, one reply
	// each (ChunkReplies): Size is the file's on the first, More says
	// another follows.
	Size int64 `json:"size,omitempty"`
	More bool  `json:"more,omitempty"`
}

// SessionChunkBytes is the most file bytes one reply carries: a download
// goes in chunks, so the process passing it on never holds the whole file.
const SessionChunkBytes = 1 << 20

// ChunkReplies splits a download's reply into chunks of at most
// SessionChunkBytes of data (one reply for an empty file); the first
// keeps the reply's other fields.
func ChunkReplies(r SessionReply) []SessionReply {
	data := r.Data
	r.Size = int64(len(data))
	var out []SessionReply
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), SessionChunkBytes)
		c := SessionReply{Data: data[:n], More: n < len(data)}
		if first {
			c = r
			c.Data, c.More = data[:n], n < len(data)
		}
		out = append(out, c)
		data = data[n:]
	}
	return out
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
// its owner ID, or jobs.ErrNoSessionSlots.
func (s *Store) ClaimSessionSlot(ctx context.Context) (string, error) {
	owner, err := sessionClaim.Run(ctx, s.rdb, []string{s.SessionSlotsKey()}, s.SessionHeartbeatKey("")).Text()
	if errors.Is(err, redis.Nil) {
		return "", jobs.ErrNoSessionSlots
	}
	if err != nil {
		return "", fmt.Errorf("store: claim session slot: %w", err)
	}
	return owner, nil
}

// SessionHeartbeat marks owner's session service alive and sets its free
// slot count: always when force (at start), else only when its registry
// entry is gone (a claim dropped it while the heartbeat had lapsed).
func (s *Store) SessionHeartbeat(ctx context.Context, owner string, free int, force bool) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.SessionHeartbeatKey(owner), time.Now().UTC().Format(time.RFC3339Nano), jobs.SessionHeartbeatTTL)
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
	return s.rdb.Set(ctx, s.SessionHeartbeatKey(owner), time.Now().UTC().Format(time.RFC3339Nano), jobs.SessionHeartbeatTTL).Err()
}

// SessionWorkerAlive reports whether owner's session heartbeat is current.
func (s *Store) SessionWorkerAlive(ctx context.Context, owner string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.SessionHeartbeatKey(owner)).Result()
	return n > 0, err
}

// PutSession writes a session's record, kept until its lifetime ends plus
// jobs.SessionRetention (or jobs.SessionRetention after it ended).
func (s *Store) PutSession(ctx context.Context, info jobs.SessionInfo) error {
	return s.sessionWrites(ctx, func(p redis.Pipeliner) error { return s.putSession(ctx, p, info) })
}

// putSession queues PutSession's writes on p.
func (s *Store) putSession(ctx context.Context, p redis.Pipeliner, info jobs.SessionInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	ttl := time.Until(info.ExpiresAt) + jobs.SessionRetention
	if info.State.Final() {
		ttl = jobs.SessionRetention
	}
	p.Set(ctx, s.SessionKey(info.ID), b, max(ttl, time.Second))
	p.ZAdd(ctx, s.SessionsKey(info.Tenant), redis.Z{Score: float64(info.CreatedAt.UnixMilli()), Member: info.ID})
	p.Expire(ctx, s.SessionsKey(info.Tenant), jobs.MaxSessionLifetime+jobs.SessionRetention)
	s.addRecent(ctx, p, "sessions", info.ID, info.Tenant, info.CreatedAt, 0, recentSessionsTTL)
	if info.State.Final() {
		p.SRem(ctx, s.tenantSessionsKey(info.Tenant), info.ID)
	}
	return nil
}

// sessionWrites sends the writes queue makes in one transaction.
func (s *Store) sessionWrites(ctx context.Context, queue func(redis.Pipeliner) error) error {
	p := s.rdb.TxPipeline()
	if err := queue(p); err != nil {
		return err
	}
	_, err := p.Exec(ctx)
	return err
}

// GetSession reads a session's record, as stored.
func (s *Store) GetSession(ctx context.Context, id string) (jobs.SessionInfo, error) {
	b, err := s.rdb.Get(ctx, s.SessionKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return jobs.SessionInfo{}, &jobs.SessionError{Err: jobs.ErrSessionNotFound, ID: id}
	}
	if err != nil {
		return jobs.SessionInfo{}, fmt.Errorf("store: get session %s: %w", id, err)
	}
	var info jobs.SessionInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return jobs.SessionInfo{}, fmt.Errorf("store: session %s: %w", id, err)
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

// sessionSendScript sends a command to the worker its session's record
// names, unless the session has ended or that worker's heartbeat is gone:
// what GetSession, SessionWorkerAlive and SendSessionCommand do, in one
// round trip. A record without a worker sends to the commands of worker ""
// (as SendSessionCommand with owner "") without asking for a heartbeat.
//
//	KEYS[1]  the session's record
//	ARGV[1]  SessionHeartbeatKey(""): the worker's name is appended
//	ARGV[2]  SessionCommandsKey(""): likewise
//	ARGV[3]  the command's JSON
//	ARGV[4:] the final states
//
// Returns {} without a record, else {outcome, record}: outcome 1 sent, 0
// not sent (the record is final or not a session's), -1 not sent (the
// worker's heartbeat is gone).
var sessionSendScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return {} end
local ok, info = pcall(cjson.decode, cur)
if not ok or type(info) ~= 'table' then return {0, cur} end
for i = 4, #ARGV do
  if info['state'] == ARGV[i] then return {0, cur} end
end
local w = info['worker']
if w == nil then w = '' end
if type(w) ~= 'string' then return {0, cur} end
if w ~= '' and redis.call('EXISTS', ARGV[1] .. w) == 0 then return {-1, cur} end
redis.call('RPUSH', ARGV[2] .. w, ARGV[3])
return {1, cur}
`)

// SendToSession sends cmd to the worker that holds session cmd.Session,
// as its record names it, and returns the record: GetSession,
// SessionWorkerAlive and SendSessionCommand in one round trip. sent is
// false when the record is final (nothing sent) and when its worker's
// heartbeat is gone (alive false: the caller marks it lost). A session
// without a record is GetSession's error.
func (s *Store) SendToSession(ctx context.Context, cmd SessionCommand) (info jobs.SessionInfo, sent, alive bool, err error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return info, false, false, err
	}
	args := []any{s.SessionHeartbeatKey(""), s.SessionCommandsKey(""), b}
	for _, st := range jobs.FinalSessionStates() {
		args = append(args, string(st))
	}
	res, err := sessionSendScript.Run(ctx, s.rdb, []string{s.SessionKey(cmd.Session)}, args...).Slice()
	if err != nil {
		return info, false, false, fmt.Errorf("store: send to session %s: %w", cmd.Session, err)
	}
	if len(res) < 2 {
		return info, false, false, &jobs.SessionError{Err: jobs.ErrSessionNotFound, ID: cmd.Session}
	}
	outcome, _ := res[0].(int64)
	rec, _ := res[1].(string)
	if err := json.Unmarshal([]byte(rec), &info); err != nil {
		return info, false, false, fmt.Errorf("store: session %s: %w", cmd.Session, err)
	}
	return info, outcome == 1, outcome != -1, nil
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
		return nil, fmt.Errorf("store: session command: %w", err)
	}
	return &cmd, nil
}

// DropReplies deletes what is left of req's replies (a download not read
// to its end).
func (s *Store) DropReplies(ctx context.Context, req string) error {
	return s.rdb.Del(ctx, s.SessionReplyKey(req)).Err()
}

// ReplySession pushes the reply for req, kept a minute; a reply with file
// data (a download) goes in chunks (ChunkReplies), kept five.
func (s *Store) ReplySession(ctx context.Context, req string, r SessionReply) error {
	return s.sessionWrites(ctx, func(p redis.Pipeliner) error { return s.replySession(ctx, p, req, r) })
}

// ReplyCell is ReplySession for a cell's reply, in the same transaction
// as, and after, the session's record (PutSession, when info is not nil)
// and its cell history (AppendSessionCell): one round trip where there
// were three on the cell's path, and whoever has the reply finds both
// written.
func (s *Store) ReplyCell(ctx context.Context, req string, r SessionReply, info *jobs.SessionInfo, id string, c SessionCell) error {
	return s.sessionWrites(ctx, func(p redis.Pipeliner) error {
		if info != nil {
			if err := s.putSession(ctx, p, *info); err != nil {
				return err
			}
		}
		if err := s.appendSessionCell(ctx, p, id, c); err != nil {
			return err
		}
		return s.replySession(ctx, p, req, r)
	})
}

// replySession queues ReplySession's writes on p.
func (s *Store) replySession(ctx context.Context, p redis.Pipeliner, req string, r SessionReply) error {
	rs := []SessionReply{r}
	if len(r.Data) > 0 {
		rs = ChunkReplies(r)
	}
	values := make([]any, 0, len(rs))
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		values = append(values, b)
	}
	p.RPush(ctx, s.SessionReplyKey(req), values...)
	p.Expire(ctx, s.SessionReplyKey(req), map[bool]time.Duration{false: time.Minute, true: 5 * time.Minute}[len(rs) > 1])
	return nil
}

// AwaitReply waits for req's reply until deadline, checking every
// interval that owner is alive; a dead owner is ErrSessionLost.
func (s *Store) AwaitReply(ctx context.Context, owner, req string, deadline time.Time) (SessionReply, error) {
	const check = 2 * time.Second
	for {
		wait := min(time.Until(deadline), check)
		if wait <= 0 {
			return SessionReply{}, fmt.Errorf("store: no answer from worker %s in time: %w", owner, context.DeadlineExceeded)
		}
		res, err := s.rdb.BLPop(ctx, max(wait, 10*time.Millisecond), s.SessionReplyKey(req)).Result()
		switch {
		case err == nil:
			var r SessionReply
			if err := json.Unmarshal([]byte(res[1]), &r); err != nil {
				return SessionReply{}, fmt.Errorf("store: session reply: %w", err)
			}
			return r, nil
		case !errors.Is(err, redis.Nil):
			if ctx.Err() != nil {
				return SessionReply{}, context.Cause(ctx)
			}
			return SessionReply{}, fmt.Errorf("store: await session reply: %w", err)
		}
		if ok, err := s.SessionWorkerAlive(ctx, owner); err == nil && !ok {
			return SessionReply{}, ErrWorkerGone
		}
	}
}

// ErrWorkerGone is AwaitReply's error when the worker's heartbeat is
// gone.
var ErrWorkerGone = errors.New("worker gone")

// CreateSession writes a new session's record unless one of its ID
// exists; it reports whether it wrote.
func (s *Store) CreateSession(ctx context.Context, info jobs.SessionInfo) (bool, error) {
	created, _, err := s.AdmitSession(ctx, info, 0)
	return created, err
}

// admitSessionScript reserves a session's ID and counts it among its
// tenant's sessions not ended, unless the ID is taken or the tenant has
// max of them (max 0: no cap). KEYS: the session's record, the tenant's
// live set. ARGV: ID, max. Returns 1 when reserved, 0 when the ID is
// taken, {2, count} at the cap.
var admitSessionScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local max = tonumber(ARGV[2])
if max > 0 then
  local n = redis.call('SCARD', KEYS[2])
  if n >= max then return {2, n} end
end
redis.call('SET', KEYS[1], '{}', 'PX', 60000)
redis.call('SADD', KEYS[2], ARGV[1])
return 1
`)

// AdmitSession writes a new session's record unless one of its ID exists
// or its tenant has max sessions not ended (0: no cap), in one script:
// concurrent creates never pass the cap. It reports whether it wrote, and
// the tenant's count when the cap refused it (live > 0).
func (s *Store) AdmitSession(ctx context.Context, info jobs.SessionInfo, max int) (created bool, live int, err error) {
	res, err := admitSessionScript.Run(ctx, s.rdb, []string{s.SessionKey(info.ID), s.tenantSessionsKey(info.Tenant)}, info.ID, max).Result()
	if err != nil {
		return false, 0, fmt.Errorf("store: create session %s: %w", info.ID, err)
	}
	switch v := res.(type) {
	case int64:
		if v == 0 {
			return false, 0, nil
		}
	case []any:
		n, _ := v[1].(int64)
		return false, int(n), nil
	}
	return true, 0, s.PutSession(ctx, info)
}

// DropSession removes a session that never started (no slot was free):
// its record and its count.
func (s *Store) DropSession(ctx context.Context, id, tenant string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.SessionKey(id))
		p.SRem(ctx, s.tenantSessionsKey(tenant), id)
		p.ZRem(ctx, s.SessionsKey(tenant), id)
		return nil
	})
	return err
}

// PruneSessions drops from tenant's count the sessions that have ended,
// are gone, or whose worker stopped (recorded lost), and returns how many
// remain.
func (s *Store) PruneSessions(ctx context.Context, tenant string) (int, error) {
	ids, err := s.rdb.SMembers(ctx, s.tenantSessionsKey(tenant)).Result()
	if err != nil {
		return 0, err
	}
	left := 0
	for _, id := range ids {
		info, err := s.GetSession(ctx, id)
		switch {
		case errors.Is(err, jobs.ErrSessionNotFound):
			_ = s.rdb.SRem(ctx, s.tenantSessionsKey(tenant), id).Err()
			continue
		case err != nil:
			return 0, err
		case info.State.Final():
			_ = s.rdb.SRem(ctx, s.tenantSessionsKey(tenant), id).Err()
			continue
		case info.ID == "":
			left++ // being created
			continue
		}
		if info.Worker != "" {
			if alive, err := s.SessionWorkerAlive(ctx, info.Worker); err == nil && !alive {
				if _, err := s.MarkLost(ctx, info, LostReason(info.Worker)); err == nil {
					continue
				}
			}
		}
		left++
	}
	return left, nil
}

// LostReason is why a session of a worker whose heartbeat is gone is lost.
func LostReason(owner string) string {
	return fmt.Sprintf("its worker %s stopped (no heartbeat for %s)", owner, jobs.SessionHeartbeatTTL)
}

// MarkLost records info as lost, unless it ended meanwhile.
func (s *Store) MarkLost(ctx context.Context, info jobs.SessionInfo, reason string) (jobs.SessionInfo, error) {
	cur, err := s.GetSession(ctx, info.ID)
	if err == nil && cur.State.Final() {
		return cur, nil
	}
	info.State, info.Reason, info.EndedAt = jobs.SessionLost, reason, time.Now().UTC()
	return info, s.PutSession(ctx, info)
}

// ListSessions returns a tenant's sessions ("" is the anonymous tenant),
// newest first, at most max, ended ones included while their records
// last. A session not ended whose worker's heartbeat is gone is recorded
// and returned as lost.
func (s *Store) ListSessions(ctx context.Context, tenant string, max int) ([]jobs.SessionInfo, error) {
	key := s.SessionsKey(tenant)
	ids, err := s.rdb.ZRevRange(ctx, key, 0, int64(max)-1).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	// The records in one MGET, and each live session's worker's
	// heartbeat once per worker, in one pipeline.
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.SessionKey(id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	var out []jobs.SessionInfo
	var gone []any
	alive := map[string]*redis.IntCmd{}
	for i, v := range vals {
		var info jobs.SessionInfo
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
		s.rdb.ZRem(ctx, key, gone...)
	}
	if len(alive) == 0 {
		return out, nil
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for owner := range alive {
			alive[owner] = p.Exists(ctx, s.SessionHeartbeatKey(owner))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for i, info := range out {
		if hb := alive[info.Worker]; hb != nil && !info.State.Final() && hb.Val() == 0 {
			if out[i], err = s.MarkLost(ctx, info, LostReason(info.Worker)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
