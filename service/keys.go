package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Key is an API key's record (its secret is never stored: only its
// SHA-256).
type Key = store.APIKey

// KeyOptions are what a new key gets besides its tenant.
type KeyOptions struct {
	// Scopes; default DefaultScopes (reading and writing jobs, not the
	// critical queue).
	Scopes []string
	// RatePerSecond, MaxQueued and MaxQueuedBytes: 0 uses the service's
	// defaults. MaxRunning: 0 is a fair share of the workers' slots.
	RatePerSecond, MaxQueued, MaxRunning int
	MaxQueuedBytes                       int64
	// MaxLimits caps the limits of the key's jobs below the operator's.
	MaxLimits jobs.Limits
}

// Keys manages API keys: the operator's `api keys` commands.
type Keys struct{ st *store.Store }

// NewKeys returns the key manager of st's namespace.
func NewKeys(st *store.Store) *Keys { return &Keys{st: st} }

// Create makes a key for tenant and returns it with its record. The key is
// shown once: only its hash is stored.
func (k *Keys) Create(ctx context.Context, tenant string, o KeyOptions) (string, Key, error) {
	if !jobs.ValidID(tenant) || len(tenant) > 64 {
		return "", Key{}, fmt.Errorf("service: tenant %q: 1-64 characters of A-Z a-z 0-9 _ . : -", tenant)
	}
	if len(o.Scopes) == 0 {
		o.Scopes = DefaultScopes
	}
	for _, sc := range o.Scopes {
		if !slices.Contains(Scopes, sc) {
			return "", Key{}, fmt.Errorf("service: unknown scope %q; scopes are %s", sc, strings.Join(Scopes, ", "))
		}
	}
	id, secret, whsec := randomString(8), randomString(32), randomString(32)
	key := "sqk_" + id + "_" + secret
	rec := Key{ID: id, Tenant: tenant, Scopes: slices.Compact(slices.Sorted(slices.Values(o.Scopes))),
		RatePerSecond: o.RatePerSecond, MaxQueued: o.MaxQueued, MaxQueuedBytes: o.MaxQueuedBytes, MaxRunning: o.MaxRunning,
		MaxLimits:     o.MaxLimits,
		WebhookSecret: "whsec_" + whsec, Hash: hashKey(key), Created: time.Now().UTC()}
	if err := k.st.PutAPIKey(ctx, rec); err != nil {
		return "", Key{}, err
	}
	return key, rec, nil
}

// List returns every key's record, by ID.
func (k *Keys) List(ctx context.Context) ([]Key, error) { return k.st.APIKeys(ctx) }

// Revoke deletes key id; its requests are refused from then on. An unknown
// ID is an error wrapping [ErrNoKey].
func (k *Keys) Revoke(ctx context.Context, id string) error { return k.st.DeleteAPIKey(ctx, id) }

// Count returns how many keys exist.
func (k *Keys) Count(ctx context.Context) (int64, error) { return k.st.CountAPIKeys(ctx) }

// ErrNoKey is an unknown or revoked key.
var ErrNoKey = store.ErrNoKey

// Authenticate resolves an API key ("sqk_...") to its caller and counts
// the request against the key's rate (a fixed one-second window per key,
// over every process), in one round trip: Unauthorized for an unknown key,
// TooMany past its rate.
func (s *Service) Authenticate(ctx context.Context, token string) (Caller, error) {
	if !strings.HasPrefix(token, "sqk_") || len(token) > 128 {
		return Caller{}, &Error{Kind: Unauthorized, Msg: "unknown or revoked API key"}
	}
	hash := hashKey(token)
	k, n, err := s.st.APIKeyByHash(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNoKey):
		return Caller{}, &Error{Kind: Unauthorized, Msg: "unknown or revoked API key"}
	case err != nil:
		return Caller{}, unavailable("cannot read the API key", err)
	case subtle.ConstantTimeCompare([]byte(k.Hash), []byte(hash)) != 1:
		return Caller{}, &Error{Kind: Unauthorized, Msg: "unknown or revoked API key"}
	}
	c := Caller{KeyID: k.ID, KeyHash: k.Hash, Tenant: k.Tenant, Scopes: k.Scopes, Caps: k.MaxLimits,
		RatePerSecond: k.RatePerSecond, MaxQueued: k.MaxQueued, MaxQueuedBytes: k.MaxQueuedBytes, MaxRunning: k.MaxRunning,
		WebhookSecret: k.WebhookSecret}
	if limit := s.rate(c); n > int64(limit) {
		return c, s.refuse(c, rateError(limit))
	}
	return c, nil
}

// KeyLive reports whether c's API key still exists: a long-lived response
// (an event stream) asks it now and then, so that revoking a key ends its
// streams too. A caller without a key (the open API, operators) is live.
func (s *Service) KeyLive(ctx context.Context, c Caller) (bool, error) {
	if c.KeyHash == "" {
		return true, nil
	}
	live, err := s.st.APIKeyExists(ctx, c.KeyHash)
	if err != nil {
		return true, unavailable("cannot read the API key", err)
	}
	return live, nil
}

// CountOpen counts a request of an open API (no key) against the
// service's rate: TooMany past it.
func (s *Service) CountOpen(ctx context.Context) error {
	n, err := s.st.RateCount(ctx, openKeyID)
	if err == nil && n > int64(s.cfg.RatePerSecond) {
		return s.refuse(Open(), rateError(s.cfg.RatePerSecond))
	}
	return nil
}

func rateError(limit int) error {
	return &Error{Kind: TooMany, Quota: QuotaRate, Msg: fmt.Sprintf("rate limit of %d requests per second exceeded", limit), RetryAfter: time.Second}
}

// rate is c's requests per second.
func (s *Service) rate(c Caller) int {
	if c.RatePerSecond > 0 {
		return c.RatePerSecond
	}
	return s.cfg.RatePerSecond
}

// OpenAllowed reports whether a request without a key is served
// (Config.Open): only while no key exists. The key count is read at most
// once a second; once a key exists, every later request needs one, for
// the life of the process (revoking every key does not reopen it).
func (s *Service) OpenAllowed(ctx context.Context) bool {
	if !s.cfg.Open || s.closedOpen.Load() {
		return false
	}
	now := time.Now().UnixNano()
	if now-s.openChecked.Load() < int64(time.Second) {
		return s.openNow.Load()
	}
	n, err := s.st.CountAPIKeys(ctx)
	if n > 0 && !s.closedOpen.Swap(true) {
		s.cfg.Logger.Info().Msg("an API key exists: every request now needs one")
	}
	s.openNow.Store(err == nil && n == 0) // an unreadable count is no permission
	s.openChecked.Store(now)
	return s.openNow.Load()
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
