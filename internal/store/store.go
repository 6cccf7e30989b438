package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandq/sandq/jobs"
)

// Store defaults.
const (
	// DefaultPrefix is the default namespace of every Redis key and
	// channel sandq owns (asynq's own keys live under "asynq:").
	DefaultPrefix = "sandq"
	// DefaultResultTTL is how long a result is kept by default.
	DefaultResultTTL = 24 * time.Hour
)

// Config configures a [Store]. The zero value is the default.
type Config struct {
	// Prefix namespaces every key and channel: results are at
	// "<Prefix>:result:<id>". Default "sandq" ([DefaultPrefix]). Tests use a
	// random prefix each to share one Redis. On a Redis Cluster it must be
	// a hash tag, such as "{sandq}": the store's scripts touch several keys
	// at once.
	Prefix string

	// ResultTTL is the lifetime of a stored result, queued, running or
	// final; every write restarts it. Default 24 h ([DefaultResultTTL]).
	// After it, the job is forgotten and its ID may be used again.
	ResultTTL time.Duration

	// SyncReplicas, when set, makes PutFinal wait (WAIT, at most
	// SyncTimeout, default 1 s) until that many replicas have a final
	// Result before it returns, and so before the worker acknowledges its
	// task: on a Sentinel set, a failover right after cannot lose a Result
	// whose task is acknowledged, which would run the job again.
	SyncReplicas int
	SyncTimeout  time.Duration
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.ResultTTL = cmp.Or(c.ResultTTL, DefaultResultTTL)
	c.SyncTimeout = cmp.Or(c.SyncTimeout, time.Second)
	return c
}

func (c Config) Check() error {
	// A prefix may be one whole hash tag ("{sandq}": on a Redis Cluster,
	// every key of the store in one slot); no other braces.
	name := c.Prefix
	if len(name) > 2 && name[0] == '{' && name[len(name)-1] == '}' {
		name = name[1 : len(name)-1]
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '{' || r == '}' }) {
		return fmt.Errorf("store: config: Prefix %q has whitespace, control characters or braces (but as one whole hash tag, {name})", c.Prefix)
	}
	if c.ResultTTL < time.Second {
		return fmt.Errorf("store: config: ResultTTL %v is under 1s", c.ResultTTL)
	}
	return nil
}

// Store is sandq's data in Redis: every key and channel is built in
// schema.go, where they are listed with their types, owners and TTLs.
// Results are plain JSON so that any Redis client can read them.
//
// A job's Result goes queued (written by the producer at enqueue), running
// (written by the worker at the start of each attempt), then final. Writes
// follow "first final wins": once a final Result is stored, neither a
// non-final nor another final write replaces it, so exactly one final
// result exists even when two workers race after a lease expiry. The check
// and the write are one Lua script, atomic in Redis.
//
// A Store is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	// syncReplicas, syncTimeout: Config.SyncReplicas, SyncTimeout.
	syncReplicas int
	syncTimeout  time.Duration
}

// New returns a Store on rdb, which the caller keeps and closes.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("store: new: nil redis client")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, prefix: cfg.Prefix, ttl: cfg.ResultTTL, syncReplicas: cfg.SyncReplicas, syncTimeout: cfg.SyncTimeout}, nil
}

// Get returns the stored Result of job id, or an error wrapping
// [jobs.ErrNotFound] if none is stored. It does not consult asynq; see
// [Client.Get] for that.
func (s *Store) Get(ctx context.Context, id string) (jobs.Result, error) {
	b, err := s.rdb.Get(ctx, s.ResultKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return jobs.Result{}, fmt.Errorf("store: get result %s: %w", id, jobs.ErrNotFound)
	}
	if err != nil {
		return jobs.Result{}, fmt.Errorf("store: get result %s: %w", id, err)
	}
	return decodeResult(id, b)
}

// GetMany returns the stored Results of ids that have one, read in one
// pipelined round trip (separate GETs, so it also works on a cluster).
func (s *Store) GetMany(ctx context.Context, ids []string) (map[string]jobs.Result, error) {
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, s.ResultKey(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("get results: %w", err)
	}
	out := make(map[string]jobs.Result, len(ids))
	for i, cmd := range cmds {
		b, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get result %s: %w", ids[i], err)
		}
		r, err := decodeResult(ids[i], b)
		if err != nil {
			return nil, err
		}
		out[ids[i]] = r
	}
	return out, nil
}

// putScript stores a Result unless a final one is stored already, and
// publishes on the done channel if it is final: the Result as stored when
// it is at most NoticeResultMax bytes (most are: a print(1) job's is about
// 600), else only its status. A waiter told a status reads the Result, so
// a large Result never passes through a subscriber's output buffer (Redis
// disconnects a subscriber whose buffer passes its pub/sub limit, 32 MB by
// default, and with it every job it waits on); one given the Result does
// not (NoticeResult). A final
// Result also drops the job from its tenant's ledger (see ledger.go). The
// tenant is the Result's, or the stored one's when the writer knows none
// (a worker that could not decode the job): it is then written into the
// Result, so ownership stays on record.
//
//	KEYS[1]  result key
//	ARGV[1]  Result JSON
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  done channel
//	ARGV[4]  "1" if the Result is final
//	ARGV[5]  the Result's status
//	ARGV[6]  the key prefix
//	ARGV[7]  the Result's tenant, "" if unknown
//	ARGV[8]  the job ID
//	ARGV[9]  "1" when an attempt starts (Start): the stored Result's
//	         enqueued_at is kept, and the reply says whether a cancel was
//	         requested
//	ARGV[10] NoticeResultMax
//	ARGV[11:] the final statuses
//
// Returns {1, held, tenant, canceled, enqueued_at} when written (held: how
// many of the tenant's jobs are still held in lanes, for a final Result;
// canceled 1 if the job's cancel key exists, for a start), {0, stored JSON}
// when a final Result was kept.
var putScript = redis.NewScript(ledgerLua + `
local cur = redis.call('GET', KEYS[1])
local tenant = ARGV[7]
local start = ARGV[9] == '1'
local enqueued = ''
if cur then
  local ok, dec = pcall(cjson.decode, cur)
  if ok and type(dec) == 'table' then
    for i = 11, #ARGV do
      if dec['status'] == ARGV[i] then return {0, cur} end
    end
    if tenant == '' and type(dec['tenant']) == 'string' then tenant = dec['tenant'] end
    if start and type(dec['enqueued_at']) == 'string' then enqueued = dec['enqueued_at'] end
  end
end
local body = ARGV[1]
if enqueued ~= '' then
  -- A starting attempt's Result has no enqueued_at (omitted when zero): the claim's stays.
  body = '{"enqueued_at":' .. cjson.encode(enqueued) .. ',' .. string.sub(body, 2)
end
if ARGV[7] == '' and tenant ~= '' then
  -- The writer does not know the job's tenant (it could not decode the
  -- job): the stored claim's stays on record.
  body = '{"tenant":' .. cjson.encode(tenant) .. ',' .. string.sub(body, 2)
end
redis.call('SET', KEYS[1], body, 'PX', ARGV[2])
redis.call('SET', statuskey(ARGV[6], ARGV[8]), ARGV[5], 'PX', ARGV[2])
local held = 0
if ARGV[4] == '1' then
  held = finish(ARGV[6], tenant, ARGV[8])
  if #body <= tonumber(ARGV[10]) then
    redis.call('PUBLISH', ARGV[3], body)
  else
    redis.call('PUBLISH', ARGV[3], ARGV[5])
  end
end
local canceled = 0
if start then canceled = redis.call('EXISTS', cancelkey(ARGV[6], ARGV[8])) end
return {1, held, tenant, canceled, enqueued}
`)

// createScript stores a Result only if the key is absent.
//
//	KEYS[1] result key, KEYS[2] status key, ARGV[1] Result JSON, ARGV[2]
//	TTL in milliseconds, ARGV[3] status
//
// Returns {1} when written, {0, stored JSON} otherwise.
var createScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return {1}
`)

// deleteScript deletes a key only if it still holds ARGV[1].
var deleteScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Put stores r as job r.ID's Result, first final wins: if a final Result
// is already stored, r is dropped and the stored one returned with written
// false. Otherwise r is stored (restarting the TTL), its status published on
// the done channel if final, and returned with written true.
//
// A worker calls Put with a running Result when an attempt starts (if it
// comes back not written, the job is already over, for instance canceled,
// and the attempt must not run) and PutFinal with the final Result at the
// end.
func (s *Store) Put(ctx context.Context, r jobs.Result) (stored jobs.Result, written bool, err error) {
	out, err := s.PutFinal(ctx, r)
	return out.Stored, out.Written, err
}

// PutOutcome is the outcome of PutFinal.
type PutOutcome struct {
	// Stored is the Result stored now; Written reports that it is r.
	Stored  jobs.Result
	Written bool
	// Held, for a final Result written, is how many of its tenant's jobs
	// wait in lanes (see Release), and Tenant that tenant.
	Held   int
	Tenant string
	// Canceled, for Start, reports that a producer had canceled the job
	// when its running Result was written.
	Canceled bool
}

// PutFinal is Put, reporting also whether the job's tenant has jobs
// waiting in its lanes: the worker that stored a final Result releases
// them (Release) when there are.
func (s *Store) PutFinal(ctx context.Context, r jobs.Result) (PutOutcome, error) {
	return s.put(ctx, r, false)
}

// Start stores r, the running Result of an attempt that starts, as Put
// does, in one round trip with what the attempt needs to know: r comes
// back with the EnqueuedAt of the Result stored at enqueue, and Canceled
// reports a cancel requested before it (RequestCancel). The cancel is read
// after the running Result is written, so a cancel that comes later finds
// the job running.
func (s *Store) Start(ctx context.Context, r jobs.Result) (PutOutcome, error) {
	r.EnqueuedAt = time.Time{}
	return s.put(ctx, r, true)
}

func (s *Store) put(ctx context.Context, r jobs.Result, start bool) (PutOutcome, error) {
	if err := checkResult(r); err != nil {
		return PutOutcome{}, fmt.Errorf("store: put result: %w", err)
	}
	b, err := jobs.EncodeJSON(r)
	if err != nil {
		return PutOutcome{}, fmt.Errorf("store: put result %s: %w", r.ID, err)
	}
	final := "0"
	if r.Status.Final() {
		final = "1"
	}
	finals := jobs.FinalStatuses()
	starting := "0"
	if start {
		starting = "1"
	}
	args := make([]any, 0, 10+len(finals))
	args = append(args, b, s.ttl.Milliseconds(), s.DoneChannel(r.ID), final, string(r.Status), s.prefix, r.Tenant, r.ID, starting, NoticeResultMax)
	for _, st := range finals {
		args = append(args, string(st))
	}
	res, err := putScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID)}, args...).Slice()
	if err != nil {
		return PutOutcome{}, fmt.Errorf("store: put result %s: %w", r.ID, err)
	}
	if len(res) == 5 && res[0] == int64(1) {
		held, _ := res[1].(int64)
		tenant, _ := res[2].(string)
		r.Tenant = tenant
		if at, _ := res[4].(string); at != "" {
			if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
				r.EnqueuedAt = t
			}
		}
		if s.syncReplicas > 0 && r.Status.Final() {
			// Best effort: a replica that does not answer in time leaves
			// the window a failover can fall in, and no more.
			_ = s.rdb.Do(ctx, "WAIT", s.syncReplicas, s.syncTimeout.Milliseconds()).Err()
		}
		return PutOutcome{Stored: r, Written: true, Held: int(held), Tenant: tenant, Canceled: res[3] == int64(1)}, nil
	}
	stored, written, err := s.scriptOutcome(r, res)
	return PutOutcome{Stored: stored, Written: written}, err
}

// Create stores r only if job r.ID has no Result yet (SET NX semantics).
// It returns the stored Result and whether it was r. The producer uses it
// to claim an ID at enqueue with a queued Result.
func (s *Store) Create(ctx context.Context, r jobs.Result) (stored jobs.Result, written bool, err error) {
	if err := checkResult(r); err != nil {
		return jobs.Result{}, false, fmt.Errorf("store: create result: %w", err)
	}
	b, err := jobs.EncodeJSON(r)
	if err != nil {
		return jobs.Result{}, false, fmt.Errorf("store: create result %s: %w", r.ID, err)
	}
	res, err := createScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID), s.statusKey(r.ID)}, b, s.ttl.Milliseconds(), string(r.Status)).Slice()
	if err != nil {
		return jobs.Result{}, false, fmt.Errorf("store: create result %s: %w", r.ID, err)
	}
	return s.scriptOutcome(r, res)
}

func (s *Store) scriptOutcome(r jobs.Result, res []any) (jobs.Result, bool, error) {
	if len(res) == 1 {
		return r, true, nil
	}
	cur, ok := res[1].(string)
	if len(res) != 2 || !ok {
		return jobs.Result{}, false, fmt.Errorf("store: store result %s: unexpected script reply %v", r.ID, res)
	}
	stored, err := decodeResult(r.ID, []byte(cur))
	return stored, false, err
}

// DeleteIfUnchanged removes job r.ID's Result if it is still exactly r, to
// roll back a claim whose enqueue failed.
func (s *Store) DeleteIfUnchanged(ctx context.Context, r jobs.Result) error {
	b, err := jobs.EncodeJSON(r)
	if err != nil {
		return err
	}
	return deleteScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID)}, b).Err()
}

func checkResult(r jobs.Result) error {
	if !jobs.ValidID(r.ID) {
		return fmt.Errorf("invalid job ID %q", r.ID)
	}
	if !r.Status.Final() && r.Status != jobs.StatusQueued && r.Status != jobs.StatusRunning {
		return fmt.Errorf("job %s: unknown status %q", r.ID, r.Status)
	}
	return nil
}

func decodeResult(id string, b []byte) (jobs.Result, error) {
	var r jobs.Result
	if err := json.Unmarshal(b, &r); err != nil {
		return jobs.Result{}, fmt.Errorf("store: decode result %s: %w", id, err)
	}
	return r, nil
}

// Redis returns the store's Redis client, for asynq's client and
// inspector on the same connections. Nothing else should need it.
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Prefix returns the store's key prefix: sandq's namespace in Redis.
func (s *Store) Prefix() string { return s.prefix }

// TTL returns how long a stored Result is kept.
func (s *Store) TTL() time.Duration { return s.ttl }

// Statuses returns the stored status of each job, read in groups of
// 1,000 (MGET per slot) from the status keys, not the Results (up to 1 MiB
// each); a job without one (never stored, or expired) is queued.
func (s *Store) Statuses(ctx context.Context, ids []string) ([]jobs.Status, error) {
	out := make([]jobs.Status, 0, len(ids))
	for len(ids) > 0 {
		group := ids[:min(len(ids), 1000)]
		ids = ids[len(group):]
		keys := make([]string, len(group))
		for i, id := range group {
			keys[i] = s.statusKey(id)
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("store: read statuses: %w", err)
		}
		for _, v := range vals {
			st := jobs.StatusQueued
			if str, ok := v.(string); ok && str != "" {
				st = jobs.Status(str)
			}
			out = append(out, st)
		}
	}
	return out, nil
}
