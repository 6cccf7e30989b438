package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// Scopes an API key may hold.
const (
	// ScopeRead reads jobs and batches: results, events, artifacts.
	ScopeRead = "jobs:read"
	// ScopeWrite enqueues and cancels jobs and batches.
	ScopeWrite = "jobs:write"
)

// Scopes lists every scope, for validation and help.
var Scopes = []string{ScopeRead, ScopeWrite}

// Key is an API key's record. The key itself is never stored: only its
// SHA-256, under "<prefix>:apikey:<hash>"; the hash "<prefix>:apikeys"
// maps each key's ID to its record, for listing and revoking.
type Key struct {
	// ID names the key in listings and `api keys revoke`; it is the
	// key's first part ("sqk_<ID>_<secret>"), not a secret.
	ID string `json:"id"`
	// Tenant is the tenant every job of the key belongs to.
	Tenant string `json:"tenant"`
	// Scopes are what the key may do.
	Scopes []string `json:"scopes"`
	// RatePerSecond caps the key's requests per second (over every API
	// process); 0 uses the server's default.
	RatePerSecond int `json:"rate_per_second,omitempty"`
	// MaxQueued caps the tenant's jobs not yet final (queued or running)
	// that were enqueued with this key; 0 uses the server's default.
	MaxQueued int `json:"max_queued,omitempty"`
	// MaxLimits caps the limits of the key's jobs below the operator's
	// caps; zero fields leave the operator's.
	MaxLimits jobs.Limits `json:"max_limits,omitzero"`
	// WebhookSecret signs the webhooks of the key's jobs (HMAC-SHA256).
	WebhookSecret string `json:"webhook_secret"`
	// Hash is the key's SHA-256, hex.
	Hash    string    `json:"hash"`
	Created time.Time `json:"created"`
}

// Has reports whether k holds scope.
func (k Key) Has(scope string) bool { return slices.Contains(k.Scopes, scope) }

// KeyStore keeps API keys in Redis.
type KeyStore struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewKeyStore returns the key store of namespace prefix.
func NewKeyStore(rdb redis.UniversalClient, prefix string) *KeyStore {
	return &KeyStore{rdb: rdb, prefix: prefix}
}

func (s *KeyStore) recordKey(hash string) string { return s.prefix + ":apikey:" + hash }
func (s *KeyStore) indexKey() string             { return s.prefix + ":apikeys" }

// ErrNoKey is returned for a key that does not exist or was revoked.
var ErrNoKey = errors.New("api: no such key")

// NewKeyOptions are what a new key gets besides its tenant.
type NewKeyOptions struct {
	Scopes        []string
	RatePerSecond int
	MaxQueued     int
	MaxLimits     jobs.Limits
}

// Create makes a key for tenant and returns it with its record. The key is
// shown once: only its hash is stored.
func (s *KeyStore) Create(ctx context.Context, tenant string, o NewKeyOptions) (string, Key, error) {
	if !jobs.ValidID(tenant) || len(tenant) > 64 {
		return "", Key{}, fmt.Errorf("api: tenant %q: 1-64 characters of A-Z a-z 0-9 _ . : -", tenant)
	}
	if len(o.Scopes) == 0 {
		o.Scopes = Scopes
	}
	for _, sc := range o.Scopes {
		if !slices.Contains(Scopes, sc) {
			return "", Key{}, fmt.Errorf("api: unknown scope %q; scopes are %s", sc, strings.Join(Scopes, ", "))
		}
	}
	id, secret, whsec := randomString(8), randomString(32), randomString(32)
	key := "sqk_" + id + "_" + secret
	k := Key{ID: id, Tenant: tenant, Scopes: slices.Compact(slices.Sorted(slices.Values(o.Scopes))),
		RatePerSecond: o.RatePerSecond, MaxQueued: o.MaxQueued, MaxLimits: o.MaxLimits,
		WebhookSecret: "whsec_" + whsec, Hash: hashKey(key), Created: time.Now().UTC()}
	b, err := json.Marshal(k)
	if err != nil {
		return "", Key{}, err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.recordKey(k.Hash), b, 0)
		p.HSet(ctx, s.indexKey(), k.ID, b)
		return nil
	})
	if err != nil {
		return "", Key{}, fmt.Errorf("api: store key: %w", err)
	}
	return key, k, nil
}

// Lookup returns the record of key, or ErrNoKey.
func (s *KeyStore) Lookup(ctx context.Context, key string) (Key, error) {
	if !strings.HasPrefix(key, "sqk_") || len(key) > 128 {
		return Key{}, ErrNoKey
	}
	hash := hashKey(key)
	b, err := s.rdb.Get(ctx, s.recordKey(hash)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Key{}, ErrNoKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("api: read key: %w", err)
	}
	var k Key
	if err := json.Unmarshal(b, &k); err != nil {
		return Key{}, fmt.Errorf("api: read key: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(k.Hash), []byte(hash)) != 1 {
		return Key{}, ErrNoKey
	}
	return k, nil
}

// List returns every key's record, by ID.
func (s *KeyStore) List(ctx context.Context) ([]Key, error) {
	m, err := s.rdb.HGetAll(ctx, s.indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("api: list keys: %w", err)
	}
	var out []Key
	for _, v := range m {
		var k Key
		if json.Unmarshal([]byte(v), &k) == nil {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Revoke deletes key id; its requests get 401 from then on.
func (s *KeyStore) Revoke(ctx context.Context, id string) error {
	v, err := s.rdb.HGet(ctx, s.indexKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("api: key %q: %w", id, ErrNoKey)
	}
	if err != nil {
		return fmt.Errorf("api: revoke key: %w", err)
	}
	var k Key
	if err := json.Unmarshal([]byte(v), &k); err != nil {
		return fmt.Errorf("api: revoke key: %w", err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.recordKey(k.Hash))
		p.HDel(ctx, s.indexKey(), id)
		return nil
	})
	return err
}

// Count returns how many keys exist.
func (s *KeyStore) Count(ctx context.Context) (int64, error) {
	return s.rdb.HLen(ctx, s.indexKey()).Result()
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomString returns n random characters of [a-zA-Z0-9], uniformly
// (bytes past the largest multiple of 62 are drawn again).
func randomString(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			panic(err)
		}
		for _, c := range buf {
			if c < 248 && len(out) < n {
				out = append(out, alphabet[int(c)%len(alphabet)])
			}
		}
	}
	return string(out)
}
