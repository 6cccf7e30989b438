package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// The ledger: every job not yet final is counted against its tenant, by
// number and by held bytes (jobs.Job.HeldBytes), from the moment it is claimed to the moment
// its final Result is stored; the claim and the count are one script, so
// concurrent submissions never pass a cap. And every tenant has a lane per
// queue: a job is released to asynq at once while its tenant has fewer
// released jobs than its cap, and held in the lane otherwise, to be
// released (oldest first, the tenant's queues in priority order) when one
// of the tenant's jobs ends. A tenant's cap is its own (tenant-caps) or a
// fair share of the fleet's job slots: the slots over the active tenants,
// at least one. A tenant is active while it has jobs not yet final and for
// ActiveWindow after its last admission: a tenant that sends one job at a
// time keeps its share between them, so its next job finds a free slot
// instead of waiting for a flooding tenant's job to end (the flooder's
// jobs beyond its share wait in its lane meanwhile). So one tenant's
// backlog sits in its lane, not in asynq's queue ahead of another tenant's
// jobs, and a tenant alone has the whole fleet.
//
// The scripts build the tenant's keys from the prefix with schema.go's
// builders (schemaLua).

// ActiveWindow is how long after its last admission a tenant with no job
// left still counts for the fair share.
const ActiveWindow = 10 * time.Second

// ledgerLua is shared by the scripts: the key names and the cap. Time is
// Redis's (TIME), one clock for every writer.
var ledgerLua = schemaLua + `
local ACTIVE_MS = ` + strconv.FormatInt(ActiveWindow.Milliseconds(), 10) + `
local RECENT_JOBS = ` + strconv.Itoa(RecentJobs) + `
local RECENT_ALL = ` + strconv.Itoa(RecentAll) + `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function runcap(P, t, slots)
  local own = tonumber(redis.call('HGET', tenantcapskey(P), t) or '0')
  if own > 0 then return own end
  if slots <= 0 then return 0 end
  local n = redis.call('SCARD', tenantskey(P))
  for _, o in ipairs(redis.call('ZRANGEBYSCORE', activekey(P), nowms() - ACTIVE_MS, '+inf')) do
    if redis.call('SISMEMBER', tenantskey(P), o) == 0 then n = n + 1 end
  end
  if n < 1 then n = 1 end
  local c = math.floor(slots / n)
  if c < 1 then c = 1 end
  return c
end
-- finish drops a job that reached its final status from its tenant's
-- ledger; it returns how many of the tenant's jobs are still held.
local function finish(P, t, id)
  local jobsKey, bytesKey, running = tkey(P, t, 'jobs'), tkey(P, t, 'bytes'), tkey(P, t, 'running')
  local n = redis.call('HGET', jobsKey, id)
  if n then
    redis.call('HDEL', jobsKey, id)
    redis.call('DECRBY', bytesKey, n)
  end
  redis.call('SREM', running, id)
  redis.call('DEL', heldkey(P, id))
  local left = redis.call('HLEN', jobsKey)
  if left == 0 then
    redis.call('SREM', tenantskey(P), t)
    redis.call('DEL', bytesKey)
    return 0
  end
  return left - redis.call('SCARD', running)
end
`

// admitScript claims a job's ID with its queued Result and counts it
// against its tenant, unless the ID is taken or a cap would be passed;
// then releases it or holds it in its lane.
//
//	KEYS[1]  result key
//	ARGV     prefix, Result JSON, TTL ms, job ID, tenant, queue, payload
//	         bytes, max jobs (0: none), max bytes (0: none), the tenant's
//	         own cap of released jobs (0: a fair share), the fleet's
//	         slots (0: unknown, release everything), payload, language
//
// Returns {0, stored JSON, held} when the ID is taken; {2, "jobs"|"bytes",
// used} when a cap would be passed; {1, "run"|"held"} when claimed. A
// claimed job joins its tenant's and every tenant's recent-jobs indexes.
var admitScript = redis.NewScript(ledgerLua + `
local P, id, t, q = ARGV[1], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur, redis.call('EXISTS', heldkey(P, id))} end
local n, maxJobs, maxBytes = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local jobsKey, bytesKey, running = tkey(P, t, 'jobs'), tkey(P, t, 'bytes'), tkey(P, t, 'running')
if maxJobs > 0 then
  local count = redis.call('HLEN', jobsKey)
  if count + 1 > maxJobs then return {2, 'jobs', count} end
end
if maxBytes > 0 then
  local used = tonumber(redis.call('GET', bytesKey) or '0')
  if used + n > maxBytes then return {2, 'bytes', used} end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', statuskey(P, id), 'queued', 'PX', ARGV[3])
redis.call('HSET', jobsKey, id, n)
redis.call('INCRBY', bytesKey, n)
redis.call('SADD', tenantskey(P), t)
local now = nowms()
local member = id .. '\t' .. t .. '\t' .. ARGV[13]
for _, r in ipairs({{seg(t), RECENT_JOBS}, {'*', RECENT_ALL}}) do
  local rk = recentkey(P, 'jobs', r[1])
  redis.call('ZADD', rk, now, member)
  redis.call('ZREMRANGEBYRANK', rk, 0, -r[2] - 1)
  redis.call('PEXPIRE', rk, ARGV[3])
end
redis.call('ZADD', activekey(P), now, t)
redis.call('ZREMRANGEBYSCORE', activekey(P), '-inf', now - ACTIVE_MS)
if tonumber(ARGV[10]) > 0 then
  redis.call('HSET', tenantcapskey(P), t, ARGV[10])
else
  redis.call('HDEL', tenantcapskey(P), t)
end
local lane = lanekey(P, q, t)
local cap = runcap(P, t, tonumber(ARGV[11]))
if cap <= 0 or (redis.call('SCARD', running) < cap and redis.call('LLEN', lane) == 0) then
  redis.call('SADD', running, id)
  return {1, 'run'}
end
redis.call('RPUSH', lane, id)
redis.call('SADD', laneskey(P), lanemember(q, t))
redis.call('SET', heldkey(P, id), ARGV[12], 'PX', ARGV[3])
return {1, 'held'}
`)

// releaseScript releases a tenant's held jobs while it has fewer released
// jobs than its cap: from its lanes in the order given (queue priority),
// oldest first. Each is marked releasing (ZADD releasing now) until
// Released; a job whose payload is gone (canceled while held) is dropped.
//
//	ARGV  prefix, tenant, the fleet's slots, now ms, queues...
//
// Returns {id, payload, id, payload, ...}.
var releaseScript = redis.NewScript(ledgerLua + `
local P, t = ARGV[1], ARGV[2]
local running = tkey(P, t, 'running')
local cap = runcap(P, t, tonumber(ARGV[3]))
local out = {}
for i = 5, #ARGV do
  local q = ARGV[i]
  local lane = lanekey(P, q, t)
  while cap <= 0 or redis.call('SCARD', running) < cap do
    local id = redis.call('LPOP', lane)
    if not id then break end
    local payload = redis.call('GET', heldkey(P, id))
    if payload then
      redis.call('SADD', running, id)
      redis.call('ZADD', releasingkey(P), ARGV[4], id)
      table.insert(out, id)
      table.insert(out, payload)
    end
  end
  if redis.call('LLEN', lane) == 0 then redis.call('SREM', laneskey(P), lanemember(q, t)) end
end
return out
`)

// Admission is what the ledger enforces for one job: caps on the tenant's
// jobs not yet final and on their held bytes (jobs.Job.HeldBytes) (0: none), the tenant's
// own cap of released jobs (0: a fair share of the fleet's slots), and the
// fleet's slots (0: unknown, nothing is held).
type Admission struct {
	MaxJobs    int
	MaxBytes   int64
	MaxRunning int
	FleetSlots int
}

// QuotaError is a refused admission: the tenant's jobs not yet final, or
// their bytes, would pass the cap.
type QuotaError struct {
	// Resource is "jobs", "bytes" or "sessions".
	Resource string
	// Used is the tenant's count or bytes before the job; Limit the cap.
	Used, Limit int64
}

func (e *QuotaError) Error() string {
	switch e.Resource {
	case "bytes":
		return fmt.Sprintf("store: the tenant's jobs not yet final hold %d bytes; the cap is %d", e.Used, e.Limit)
	case "sessions":
		return fmt.Sprintf("store: the tenant has %d sessions not ended; the cap is %d", e.Used, e.Limit)
	}
	return fmt.Sprintf("store: the tenant has %d jobs not yet final; the cap is %d", e.Used, e.Limit)
}

// Claim is the outcome of claiming one job's ID.
type Claim struct {
	// Stored is the Result stored now: the one given when Created.
	Stored jobs.Result
	// Created reports that the given Result was written.
	Created bool
	// Held reports that the job waits in its tenant's lane: the worker
	// that ends one of the tenant's jobs, or the release sweep, enqueues
	// it. For an existing claim, that it is still held.
	Held bool
	// Err is why the claim failed: a *QuotaError, or Redis's.
	Err error
}

// Claimed is a job to claim: its queued Result, its task payload, the
// bytes it reserves against its tenant's cap and the admission it is
// checked against.
type Claimed struct {
	Result  jobs.Result
	Tenant  string
	Queue   jobs.Queue
	Payload []byte
	// Bytes is what the job holds of its tenant's byte cap until it ends:
	// its payload and what it may add while it runs (jobs.Job.HeldBytes).
	// Never less than the payload.
	Bytes     int64
	Admission Admission
}

func (s *Store) admitArgs(c Claimed) ([]any, error) {
	if err := checkResult(c.Result); err != nil {
		return nil, fmt.Errorf("store: claim: %w", err)
	}
	b, err := jobs.EncodeJSON(c.Result)
	if err != nil {
		return nil, err
	}
	a := c.Admission
	return []any{s.prefix, b, s.ttl.Milliseconds(), c.Result.ID, c.Tenant, string(c.Queue), max(c.Bytes, int64(len(c.Payload))),
		a.MaxJobs, a.MaxBytes, a.MaxRunning, a.FleetSlots, c.Payload, c.Result.Lang}, nil
}

func (s *Store) admitOutcome(c Claimed, res []any, a Admission) Claim {
	if len(res) < 2 {
		return Claim{Err: fmt.Errorf("store: claim %s: unexpected script reply %v", c.Result.ID, res)}
	}
	code, _ := res[0].(int64)
	switch code {
	case 0:
		cur, _ := res[1].(string)
		stored, err := decodeResult(c.Result.ID, []byte(cur))
		held := len(res) > 2 && res[2] == int64(1)
		return Claim{Stored: stored, Held: held, Err: err}
	case 2:
		what, _ := res[1].(string)
		used, _ := res[2].(int64)
		limit := int64(a.MaxJobs)
		if what == "bytes" {
			limit = a.MaxBytes
		}
		return Claim{Err: &QuotaError{Resource: what, Used: used, Limit: limit}}
	}
	how, _ := res[1].(string)
	return Claim{Stored: c.Result, Created: true, Held: how == "held"}
}

// Admit claims c's job ID with its queued Result and counts it in its
// tenant's ledger, atomically; see the ledger's comment.
func (s *Store) Admit(ctx context.Context, c Claimed) Claim {
	args, err := s.admitArgs(c)
	if err != nil {
		return Claim{Err: err}
	}
	res, err := admitScript.Run(ctx, s.rdb, []string{s.ResultKey(c.Result.ID)}, args...).Slice()
	if err != nil {
		return Claim{Err: fmt.Errorf("store: claim %s: %w", c.Result.ID, err)}
	}
	return s.admitOutcome(c, res, c.Admission)
}

// AdmitMany is Admit for many jobs in one pipelined round trip (EVAL, not
// EVALSHA: a pipeline cannot fall back when the script is not cached). An
// item whose reply cannot be read is tried again alone.
func (s *Store) AdmitMany(ctx context.Context, cs []Claimed) []Claim {
	out := make([]Claim, len(cs))
	cmds := make([]*redis.Cmd, len(cs))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cs {
			args, err := s.admitArgs(c)
			if err != nil {
				out[i].Err = err
				continue
			}
			cmds[i] = admitScript.Eval(ctx, p, []string{s.ResultKey(c.Result.ID)}, args...)
		}
		return nil
	})
	for i, c := range cs {
		if out[i].Err != nil {
			continue
		}
		if cmds[i] != nil {
			if res, err := cmds[i].Slice(); err == nil {
				out[i] = s.admitOutcome(c, res, c.Admission)
				continue
			}
		}
		out[i] = s.Admit(ctx, c)
	}
	return out
}

// Release releases tenant's held jobs up to its cap (see the ledger) and
// returns them with their task payloads, marked releasing: enqueue each,
// then call Released.
func (s *Store) Release(ctx context.Context, tenant string, fleetSlots int) ([]Held, error) {
	args := []any{s.prefix, tenant, fleetSlots, time.Now().UnixMilli()}
	for _, q := range jobs.Queues() {
		args = append(args, string(q))
	}
	res, err := releaseScript.Run(ctx, s.rdb, []string{s.lanesKey()}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("store: release %q: %w", tenant, err)
	}
	out := make([]Held, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		id, _ := res[i].(string)
		payload, _ := res[i+1].(string)
		out = append(out, Held{ID: id, Payload: []byte(payload)})
	}
	return out, nil
}

// Held is a job released from a lane: its ID and task payload.
type Held struct {
	ID      string
	Payload []byte
}

// Released records that jobs released from their lanes are in asynq: their
// payloads and releasing marks go.
func (s *Store) Released(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Del(ctx, s.heldKey(id))
		}
		members := make([]any, len(ids))
		for i, id := range ids {
			members[i] = id
		}
		p.ZRem(ctx, s.releasingKey(), members...)
		return nil
	})
	return err
}

// StaleReleases returns jobs released over age ago and not yet Released
// (their releaser died between the release and asynq), with their
// payloads, to enqueue again (asynq's task-ID check makes it safe).
func (s *Store) StaleReleases(ctx context.Context, age time.Duration) ([]Held, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.releasingKey(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(time.Now().Add(-age).UnixMilli(), 10), Count: 100}).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	var out []Held
	for _, id := range ids {
		b, err := s.rdb.Get(ctx, s.heldKey(id)).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			_ = s.rdb.ZRem(ctx, s.releasingKey(), id).Err() // ended, or expired
		case err != nil:
			return out, err
		default:
			out = append(out, Held{ID: id, Payload: b})
		}
	}
	return out, nil
}

// LaneTenants returns the tenants whose lanes hold jobs.
func (s *Store) LaneTenants(ctx context.Context) ([]string, error) {
	members, err := s.rdb.SMembers(ctx, s.lanesKey()).Result()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range members {
		_, t, _ := strings.Cut(m, "/")
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

// TenantUsage is a tenant's ledger.
type TenantUsage struct {
	// Jobs not yet final, their held bytes (jobs.Job.HeldBytes), and how many of them are
	// released to asynq (the rest are held in lanes).
	Jobs, Running int64
	Bytes         int64
}

// Usage reads tenant's ledger.
func (s *Store) Usage(ctx context.Context, tenant string) (TenantUsage, error) {
	var jobsN, running *redis.IntCmd
	var bytes *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		jobsN = p.HLen(ctx, s.tenantJobsKey(tenant))
		running = p.SCard(ctx, s.tenantRunningKey(tenant))
		bytes = p.Get(ctx, s.tenantBytesKey(tenant))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return TenantUsage{}, err
	}
	b, _ := bytes.Int64()
	return TenantUsage{Jobs: jobsN.Val(), Running: running.Val(), Bytes: b}, nil
}

// Usages reads the ledgers of the tenants with jobs not yet final, at most
// max of them (in no set order), in one round trip after the listing.
func (s *Store) Usages(ctx context.Context, max int) (map[string]TenantUsage, error) {
	tenants, err := s.rdb.SRandMemberN(ctx, s.tenantsKey(), int64(max)).Result()
	if err != nil {
		return nil, err
	}
	type cmds struct {
		jobs, running *redis.IntCmd
		bytes         *redis.StringCmd
	}
	cs := make([]cmds, len(tenants))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tenants {
			cs[i] = cmds{p.HLen(ctx, s.tenantJobsKey(t)), p.SCard(ctx, s.tenantRunningKey(t)), p.Get(ctx, s.tenantBytesKey(t))}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make(map[string]TenantUsage, len(tenants))
	for i, t := range tenants {
		b, _ := cs[i].bytes.Int64()
		out[t] = TenantUsage{Jobs: cs[i].jobs.Val(), Running: cs[i].running.Val(), Bytes: b}
	}
	return out, nil
}

// Tenants returns the tenants with jobs not yet final.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	return s.rdb.SMembers(ctx, s.tenantsKey()).Result()
}

// pruneScript drops from a tenant's ledger a job whose Result is gone or
// final (its final write predates the ledger, or a fault lost the
// update). ARGV: prefix, tenant, job ID. KEYS[1]: the job's result key.
var pruneScript = redis.NewScript(ledgerLua + `
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, dec = pcall(cjson.decode, cur)
  if ok and type(dec) == 'table' and (dec['status'] == 'queued' or dec['status'] == 'running') then return 0 end
end
finish(ARGV[1], ARGV[2], ARGV[3])
return 1
`)

// PruneTenant drops from tenant's ledger the jobs whose Result is gone or
// final, and returns its usage after.
func (s *Store) PruneTenant(ctx context.Context, tenant string) (TenantUsage, error) {
	ids, err := s.rdb.HKeys(ctx, s.tenantJobsKey(tenant)).Result()
	if err != nil {
		return TenantUsage{}, err
	}
	for len(ids) > 0 {
		group := ids[:min(len(ids), 1000)]
		ids = ids[len(group):]
		keys := make([]string, len(group))
		for i, id := range group {
			keys[i] = s.statusKey(id)
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return TenantUsage{}, err
		}
		for i, id := range group {
			if st, ok := vals[i].(string); ok && !jobs.Status(st).Final() {
				continue
			}
			if err := pruneScript.Run(ctx, s.rdb, []string{s.ResultKey(id)}, s.prefix, tenant, id).Err(); err != nil {
				return TenantUsage{}, err
			}
		}
	}
	return s.Usage(ctx, tenant)
}

// SetFleetSlots records that worker owner has slots job slots (0: it has
// left). A worker sets it beside its heartbeat.
func (s *Store) SetFleetSlots(ctx context.Context, owner string, slots int) error {
	if slots <= 0 {
		return s.rdb.HDel(ctx, s.fleetKey(), owner).Err()
	}
	return s.rdb.HSet(ctx, s.fleetKey(), owner, slots).Err()
}

// FleetSlots sums the job slots of the workers whose heartbeat is current,
// and forgets the others.
func (s *Store) FleetSlots(ctx context.Context) (int, error) {
	m, err := s.rdb.HGetAll(ctx, s.fleetKey()).Result()
	if err != nil || len(m) == 0 {
		return 0, err
	}
	owners := make([]string, 0, len(m))
	cmds := make([]*redis.IntCmd, 0, len(m))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for owner := range m {
			owners = append(owners, owner)
			cmds = append(cmds, p.Exists(ctx, OwnerKey(owner)))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	total := 0
	for i, owner := range owners {
		if cmds[i].Val() == 0 {
			_ = s.rdb.HDel(ctx, s.fleetKey(), owner).Err()
			continue
		}
		n, _ := strconv.Atoi(m[owner])
		total += n
	}
	return total, nil
}

// unclaimScript deletes a claim that is still exactly ARGV[4] and drops the
// job from its tenant's ledger. ARGV: prefix, tenant, job ID, claim JSON.
var unclaimScript = redis.NewScript(ledgerLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[4] then return 0 end
redis.call('DEL', KEYS[1], statuskey(ARGV[1], ARGV[3]))
finish(ARGV[1], ARGV[2], ARGV[3])
return 1
`)

// Unclaim rolls back a claim whose enqueue failed: the claim (if it is
// still exactly r) goes, and the job leaves its tenant's ledger.
func (s *Store) Unclaim(ctx context.Context, r jobs.Result) error {
	b, err := jobs.EncodeJSON(r)
	if err != nil {
		return err
	}
	return unclaimScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID)}, s.prefix, r.Tenant, r.ID, b).Err()
}

// PendingJobIDs lists tenant's jobs not yet final.
func (s *Store) PendingJobIDs(ctx context.Context, tenant string) ([]string, error) {
	return s.rdb.HKeys(ctx, s.tenantJobsKey(tenant)).Result()
}
