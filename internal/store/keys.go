package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// APIKey is an API key's record. The key itself is never stored: only its
// SHA-256 (Hash), under apiKeyKey(Hash); apiKeysKey maps each key's ID to
// its record, for listing and revoking.
type APIKey struct {
	// ID names the key in listings and `api keys revoke`; it is the key's
	// first part ("sqk_<ID>_<secret>"), not a secret.
	ID string `json:"id"`
	// Tenant is the tenant every job of the key belongs to.
	Tenant string `json:"tenant"`
	// Scopes are what the key may do.
	Scopes []string `json:"scopes"`
	// RatePerSecond caps the key's requests per second (over every API
	// process); 0 uses the server's default.
	RatePerSecond int `json:"rate_per_second,omitempty"`
	// MaxQueued caps the tenant's jobs not yet final (queued or running);
	// 0 uses the server's default. MaxQueuedBytes caps their payload
	// bytes; 0 uses the server's default.
	MaxQueued      int   `json:"max_queued,omitempty"`
	MaxQueuedBytes int64 `json:"max_queued_bytes,omitempty"`
	// MaxRunning caps the tenant's jobs handed to the workers at once; 0
	// is a fair share of the workers' slots.
	MaxRunning int `json:"max_running,omitempty"`
	// MaxLimits caps the limits of the key's jobs below the operator's
	// caps; zero fields leave the operator's.
	MaxLimits jobs.Limits `json:"max_limits,omitzero"`
	// WebhookSecret signs the webhooks of the key's jobs (HMAC-SHA256).
	WebhookSecret string `json:"webhook_secret"`
	// Hash is the key's SHA-256, hex.
	Hash    string    `json:"hash"`
	Created time.Time `json:"created"`
}

// ErrNoKey: no API key has that hash or ID (never made, or revoked).
var ErrNoKey = errors.New("store: no such API key")

// PutAPIKey stores k's record under its hash and its ID.
func (s *Store) PutAPIKey(ctx context.Context, k APIKey) error {
	b, err := json.Marshal(k)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.apiKeyKey(k.Hash), b, 0)
		p.HSet(ctx, s.apiKeysKey(), k.ID, b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: put API key: %w", err)
	}
	return nil
}

// APIKeyExists reports whether the key whose SHA-256 is hash exists (is
// not revoked).
func (s *Store) APIKeyExists(ctx context.Context, hash string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.apiKeyKey(hash)).Result()
	if err != nil {
		return false, fmt.Errorf("store: read API key: %w", err)
	}
	return n == 1, nil
}

// APIKeyByHash reads the record of the key whose SHA-256 is hash and, in
// the same round trip, counts a request of it against the rate counter of
// this second (RateCount's). It returns ErrNoKey for an unknown hash (the
// count is made all the same: an unknown key is a caller too).
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (APIKey, int64, error) {
	var get *redis.StringCmd
	var incr *redis.IntCmd
	rk := s.rateKey(hash, time.Now().Unix())
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.apiKeyKey(hash))
		incr = p.Incr(ctx, rk)
		p.Expire(ctx, rk, 2*time.Second)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return APIKey{}, 0, fmt.Errorf("store: read API key: %w", err)
	}
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return APIKey{}, incr.Val(), ErrNoKey
	}
	if err != nil {
		return APIKey{}, 0, fmt.Errorf("store: read API key: %w", err)
	}
	var k APIKey
	if err := json.Unmarshal(b, &k); err != nil {
		return APIKey{}, 0, fmt.Errorf("store: read API key: %w", err)
	}
	return k, incr.Val(), nil
}

// APIKeys returns every key's record, sorted by ID.
func (s *Store) APIKeys(ctx context.Context) ([]APIKey, error) {
	m, err := s.rdb.HGetAll(ctx, s.apiKeysKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list API keys: %w", err)
	}
	var out []APIKey
	for _, v := range m {
		var k APIKey
		if json.Unmarshal([]byte(v), &k) == nil {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b APIKey) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteAPIKey removes key id's record; ErrNoKey if there is none.
func (s *Store) DeleteAPIKey(ctx context.Context, id string) error {
	v, err := s.rdb.HGet(ctx, s.apiKeysKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("store: API key %q: %w", id, ErrNoKey)
	}
	if err != nil {
		return fmt.Errorf("store: revoke API key: %w", err)
	}
	var k APIKey
	if err := json.Unmarshal([]byte(v), &k); err != nil {
		return fmt.Errorf("store: revoke API key: %w", err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.apiKeyKey(k.Hash))
		p.HDel(ctx, s.apiKeysKey(), id)
		return nil
	})
	return err
}

// CountAPIKeys returns how many keys exist.
func (s *Store) CountAPIKeys(ctx context.Context) (int64, error) {
	return s.rdb.HLen(ctx, s.apiKeysKey()).Result()
}

// RateCount counts one request of who in this second, over every process
// sharing the store, and returns the second's count so far.
func (s *Store) RateCount(ctx context.Context, who string) (int64, error) {
	rk := s.rateKey(who, time.Now().Unix())
	var incr *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, rk)
		p.Expire(ctx, rk, 2*time.Second)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return incr.Val(), nil
}
