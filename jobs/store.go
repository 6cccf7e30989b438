package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store defaults.
const (
	// DefaultPrefix is the default namespace of every Redis key and
	// channel sandq owns (asynq's own keys live under "asynq:").
	DefaultPrefix = "sandq"
	// DefaultResultTTL is how long a result is kept by default.
	DefaultResultTTL = 24 * time.Hour
)

var (
	// ErrNotFound means no job with that ID is known: no result is
	// stored (or it expired) and no task with the ID is in any queue.
	ErrNotFound = errors.New("jobs: job not found")

	// ErrAlreadyFinal means the job already has a final result, so it can
	// no longer be canceled.
	ErrAlreadyFinal = errors.New("jobs: job already has a final result")
)

// StoreConfig configures a [Store]. The zero value is the default.
type StoreConfig struct {
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
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c StoreConfig) WithDefaults() StoreConfig {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.ResultTTL = cmp.Or(c.ResultTTL, DefaultResultTTL)
	return c
}

func (c StoreConfig) validate() error {
	// A prefix may be one whole hash tag ("{sandq}": on a Redis Cluster,
	// every key of the store in one slot); no other braces.
	name := c.Prefix
	if len(name) > 2 && name[0] == '{' && name[len(name)-1] == '}' {
		name = name[1 : len(name)-1]
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '{' || r == '}' }) {
		return fmt.Errorf("jobs: config: Prefix %q has whitespace, control characters or braces (but as one whole hash tag, {name})", c.Prefix)
	}
	if c.ResultTTL < time.Second {
		return fmt.Errorf("jobs: config: ResultTTL %v is under 1s", c.ResultTTL)
	}
	return nil
}

// Store keeps job results in Redis as plain JSON so that any Redis client
// can read them. The layout, with P the prefix (default "sandq"):
//
//	P:result:<id>   string, the Result JSON, TTL ResultTTL
//	P:done:<id>     pub/sub channel; the final status is published here
//	                when it is stored, for Wait
//	P:cancel        pub/sub channel; a job ID is published here when a
//	                producer cancels that job, for the worker running it
//	P:cancel:<id>   string, the time the cancel was requested (RFC 3339),
//	                TTL ResultTTL, so a worker that picks the job up later
//	                still sees it
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
}

// NewStore returns a Store on rdb, which the caller keeps and closes.
func NewStore(rdb redis.UniversalClient, cfg StoreConfig) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("jobs: new store: nil redis client")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, prefix: cfg.Prefix, ttl: cfg.ResultTTL}, nil
}

// Prefix returns the store's key prefix: sandq's namespace in Redis.
func (s *Store) Prefix() string { return s.prefix }

// ResultKey returns the Redis key of job id's Result: "<prefix>:result:<id>".
func (s *Store) ResultKey(id string) string { return s.prefix + ":result:" + id }

// DoneChannel returns the channel on which job id's final status is
// published when its final Result is stored: "<prefix>:done:<id>".
func (s *Store) DoneChannel(id string) string { return s.prefix + ":done:" + id }

// CancelChannel returns the channel on which canceled job IDs are
// published: "<prefix>:cancel".
func (s *Store) CancelChannel() string { return s.prefix + ":cancel" }

// CancelKey returns the key marking job id as canceled: "<prefix>:cancel:<id>".
func (s *Store) CancelKey(id string) string { return s.prefix + ":cancel:" + id }

// Get returns the stored Result of job id, or an error wrapping
// [ErrNotFound] if none is stored. It does not consult asynq; see
// [Client.Get] for that.
func (s *Store) Get(ctx context.Context, id string) (Result, error) {
	b, err := s.rdb.Get(ctx, s.ResultKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Result{}, fmt.Errorf("jobs: get result %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Result{}, fmt.Errorf("jobs: get result %s: %w", id, err)
	}
	return decodeResult(id, b)
}

// getMany returns the stored Results of ids that have one, read in one
// pipelined round trip (separate GETs, so it also works on a cluster).
func (s *Store) getMany(ctx context.Context, ids []string) (map[string]Result, error) {
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
	out := make(map[string]Result, len(ids))
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
// publishes its status on the done channel if it is final. Only the status
// is published, never the Result: a waiter reads the Result it is told
// about, so a large Result never passes through a subscriber's output
// buffer (Redis disconnects a subscriber whose buffer passes its pub/sub
// limit, 32 MB by default, and with it every job it waits on).
//
//	KEYS[1]  result key
//	ARGV[1]  Result JSON
//	ARGV[2]  TTL in milliseconds
//	ARGV[3]  done channel
//	ARGV[4]  "1" if the Result is final
//	ARGV[5]  the Result's status
//	ARGV[6:] the final statuses
//
// Returns {1} when written, {0, stored JSON} when a final Result was kept.
var putScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, dec = pcall(cjson.decode, cur)
  if ok and type(dec) == 'table' then
    for i = 6, #ARGV do
      if dec['status'] == ARGV[i] then return {0, cur} end
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] == '1' then redis.call('PUBLISH', ARGV[3], ARGV[5]) end
return {1}
`)

// createScript stores a Result only if the key is absent.
//
//	KEYS[1] result key, ARGV[1] Result JSON, ARGV[2] TTL in milliseconds
//
// Returns {1} when written, {0, stored JSON} otherwise.
var createScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
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
// and the attempt must not run) and with the final Result at the end.
func (s *Store) Put(ctx context.Context, r Result) (stored Result, written bool, err error) {
	if err := checkResult(r); err != nil {
		return Result{}, false, fmt.Errorf("jobs: put result: %w", err)
	}
	b, err := EncodeJSON(r)
	if err != nil {
		return Result{}, false, fmt.Errorf("jobs: put result %s: %w", r.ID, err)
	}
	final := "0"
	if r.Status.Final() {
		final = "1"
	}
	args := make([]any, 0, 5+len(finalStatuses))
	args = append(args, b, s.ttl.Milliseconds(), s.DoneChannel(r.ID), final, string(r.Status))
	for _, st := range finalStatuses {
		args = append(args, string(st))
	}
	res, err := putScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID)}, args...).Slice()
	if err != nil {
		return Result{}, false, fmt.Errorf("jobs: put result %s: %w", r.ID, err)
	}
	return s.scriptOutcome(r, res)
}

// Create stores r only if job r.ID has no Result yet (SET NX semantics).
// It returns the stored Result and whether it was r. The producer uses it
// to claim an ID at enqueue with a queued Result.
func (s *Store) Create(ctx context.Context, r Result) (stored Result, written bool, err error) {
	if err := checkResult(r); err != nil {
		return Result{}, false, fmt.Errorf("jobs: create result: %w", err)
	}
	b, err := EncodeJSON(r)
	if err != nil {
		return Result{}, false, fmt.Errorf("jobs: create result %s: %w", r.ID, err)
	}
	res, err := createScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID)}, b, s.ttl.Milliseconds()).Slice()
	if err != nil {
		return Result{}, false, fmt.Errorf("jobs: create result %s: %w", r.ID, err)
	}
	return s.scriptOutcome(r, res)
}

func (s *Store) scriptOutcome(r Result, res []any) (Result, bool, error) {
	if len(res) == 1 {
		return r, true, nil
	}
	cur, ok := res[1].(string)
	if len(res) != 2 || !ok {
		return Result{}, false, fmt.Errorf("jobs: store result %s: unexpected script reply %v", r.ID, res)
	}
	stored, err := decodeResult(r.ID, []byte(cur))
	return stored, false, err
}

// deleteIfUnchanged removes job r.ID's Result if it is still exactly r, to
// roll back a claim whose enqueue failed.
func (s *Store) deleteIfUnchanged(ctx context.Context, r Result) error {
	b, err := EncodeJSON(r)
	if err != nil {
		return err
	}
	return deleteScript.Run(ctx, s.rdb, []string{s.ResultKey(r.ID)}, b).Err()
}

// RequestCancel marks job id as canceled (key "<prefix>:cancel:<id>") and
// publishes id on the cancel channel, so that the worker running it kills
// the program and a worker that picks it up later does not start it.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.CancelKey(id), time.Now().UTC().Format(time.RFC3339Nano), s.ttl)
		p.Publish(ctx, s.CancelChannel(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("jobs: request cancel %s: %w", id, err)
	}
	return nil
}

// CancelRequested reports whether a producer canceled job id. A worker
// checks it when an attempt starts.
func (s *Store) CancelRequested(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.CancelKey(id)).Result()
	if err != nil {
		return false, fmt.Errorf("jobs: check cancel %s: %w", id, err)
	}
	return n > 0, nil
}

// WatchCancels subscribes to the cancel channel and returns the IDs of
// jobs canceled from now on. The subscription is active when WatchCancels
// returns. The channel is closed when ctx ends. Pub/sub is at-most-once: a
// cancel published while the connection is down is missed, which is why
// asynq's own cancel and the cancel key back it up.
func (s *Store) WatchCancels(ctx context.Context) (<-chan string, error) {
	ps, err := s.subscribe(ctx, s.CancelChannel())
	if err != nil {
		return nil, fmt.Errorf("jobs: watch cancels: %w", err)
	}
	out := make(chan string)
	go func() {
		defer close(out)
		defer ps.Close()
		msgs := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// subscribe subscribes to channel and waits for Redis to confirm, so that
// no message published after it returns is missed.
func (s *Store) subscribe(ctx context.Context, channel string) (*redis.PubSub, error) {
	ps := s.rdb.Subscribe(ctx, channel)
	msg, err := ps.Receive(ctx)
	if err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe %s: %w", channel, err)
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe %s: unexpected reply %T", channel, msg)
	}
	return ps, nil
}

// OwnerKey is the key whose presence says that container owner (one
// worker's pool) is alive: "sandq-owner:<owner>", outside any prefix, since
// one container engine may serve workers of several namespaces on this
// Redis, and each reconciler must spare all of their containers.
func OwnerKey(owner string) string { return "sandq-owner:" + owner }

// Heartbeat marks owner alive for ttl. A worker calls it well within ttl,
// again and again.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, OwnerKey(owner), time.Now().UTC().Format(time.RFC3339Nano), ttl).Err(); err != nil {
		return fmt.Errorf("jobs: heartbeat %s: %w", owner, err)
	}
	return nil
}

// OwnerAlive reports whether owner's heartbeat is current.
func (s *Store) OwnerAlive(ctx context.Context, owner string) (bool, error) {
	n, err := s.rdb.Exists(ctx, OwnerKey(owner)).Result()
	if err != nil {
		return false, fmt.Errorf("jobs: owner %s alive: %w", owner, err)
	}
	return n > 0, nil
}

// OwnerGone removes owner's heartbeat: it has stopped.
func (s *Store) OwnerGone(ctx context.Context, owner string) error {
	return s.rdb.Del(ctx, OwnerKey(owner)).Err()
}

// LibsUse is what workers record of an installed library set's volume:
// its size when installed and when a job last used it. The collector of
// unused sets (worker.LibsCollector) reads it.
type LibsUse struct {
	Volume   string    `json:"volume"`
	Bytes    int64     `json:"bytes,omitempty"`
	LastUsed time.Time `json:"last_used"`
}

// LibsKey is the hash of library set uses: "<prefix>:libs", volume to
// LibsUse JSON.
func (s *Store) LibsKey() string { return s.prefix + ":libs" }

// UseLibs records that a job used the set in volume now; bytes, when not
// zero, is its size (known when it was installed).
func (s *Store) UseLibs(ctx context.Context, volume string, bytes int64) error {
	if bytes == 0 {
		if old, err := s.rdb.HGet(ctx, s.LibsKey(), volume).Bytes(); err == nil {
			var u LibsUse
			if json.Unmarshal(old, &u) == nil {
				bytes = u.Bytes
			}
		}
	}
	b, err := EncodeJSON(LibsUse{Volume: volume, Bytes: bytes, LastUsed: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.LibsKey(), volume, b).Err(); err != nil {
		return fmt.Errorf("jobs: record use of %s: %w", volume, err)
	}
	return nil
}

// LibsUses returns the recorded uses by volume.
func (s *Store) LibsUses(ctx context.Context) (map[string]LibsUse, error) {
	m, err := s.rdb.HGetAll(ctx, s.LibsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("jobs: read library uses: %w", err)
	}
	out := make(map[string]LibsUse, len(m))
	for vol, b := range m {
		var u LibsUse
		if err := json.Unmarshal([]byte(b), &u); err == nil {
			out[vol] = u
		}
	}
	return out, nil
}

// ForgetLibs removes the record of volume (removed).
func (s *Store) ForgetLibs(ctx context.Context, volume string) error {
	return s.rdb.HDel(ctx, s.LibsKey(), volume).Err()
}

// LangVersion is a language's toolchain version as a worker read it from
// the language's image (see worker.PublishVersions); `enqueue langs` and
// the HTTP API list them.
type LangVersion struct {
	// Lang is the canonical language name.
	Lang string `json:"lang"`
	// Version is the toolchain's version line, such as "Python 3.11.2";
	// empty when it could not be read (Error says why).
	Version string `json:"version,omitempty"`
	// Error says why the version could not be read.
	Error string `json:"error,omitempty"`
	// Image and ImageID name the image it was read from.
	Image   string `json:"image"`
	ImageID string `json:"image_id,omitempty"`
	// Worker is the worker that read it, At when.
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
}

// LangsKey is the hash of published toolchain versions: "<prefix>:langs",
// language name to LangVersion JSON.
func (s *Store) LangsKey() string { return s.prefix + ":langs" }

// PutLangVersion publishes v, replacing the version published for its
// language.
func (s *Store) PutLangVersion(ctx context.Context, v LangVersion) error {
	b, err := EncodeJSON(v)
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.LangsKey(), v.Lang, b).Err(); err != nil {
		return fmt.Errorf("jobs: put version of %s: %w", v.Lang, err)
	}
	return nil
}

// LangVersions returns the published toolchain versions by language.
func (s *Store) LangVersions(ctx context.Context) (map[string]LangVersion, error) {
	m, err := s.rdb.HGetAll(ctx, s.LangsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("jobs: read versions: %w", err)
	}
	out := make(map[string]LangVersion, len(m))
	for lang, b := range m {
		var v LangVersion
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			return nil, fmt.Errorf("jobs: decode version of %s: %w", lang, err)
		}
		out[lang] = v
	}
	return out, nil
}

func checkResult(r Result) error {
	if !ValidID(r.ID) {
		return fmt.Errorf("invalid job ID %q", r.ID)
	}
	if !r.Status.Final() && r.Status != StatusQueued && r.Status != StatusRunning {
		return fmt.Errorf("job %s: unknown status %q", r.ID, r.Status)
	}
	return nil
}

func decodeResult(id string, b []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, fmt.Errorf("jobs: decode result %s: %w", id, err)
	}
	return r, nil
}

// EncodeJSON marshals v as one line of JSON without HTML escaping, so "<"
// in program output reads as "<" through redis-cli and in results files.
// Every writer of result JSON uses it.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
