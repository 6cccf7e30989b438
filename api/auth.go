package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/redis/go-redis/v9"
)

type keyCtx struct{}

// openKey is the key of a request served without one (Config.Open).
var openKey = Key{ID: "open", Scopes: Scopes}

// keyOf returns the request's key, set by authenticate.
func keyOf(ctx context.Context) Key {
	k, _ := ctx.Value(keyCtx{}).(Key)
	return k
}

// scope is the Operation.Metadata entry naming the scope an operation
// needs.
const scope = "scope"

// authenticate resolves the request's API key, checks the operation's
// scope and the key's rate, and puts the key in the context: 401 without a
// valid key, 403 without the scope, 429 past the rate. The key's record
// and its rate counter are read in one round trip.
func (s *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	need, _ := ctx.Operation().Metadata[scope].(string)
	if need == "" {
		next(ctx)
		return
	}
	k := openKey
	rateID := "open"
	auth := ctx.Header("Authorization")
	if auth != "" || !s.open(ctx.Context()) {
		token, ok := strings.CutPrefix(auth, "Bearer ")
		token = strings.TrimSpace(token)
		if !ok || token == "" {
			ctx.SetHeader("WWW-Authenticate", `Bearer realm="sandq"`)
			_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "an API key is required: Authorization: Bearer <key>")
			return
		}
		rateID = hashKey(token)
		var err error
		k, err = s.lookup(ctx.Context(), token, rateID)
		switch {
		case errors.Is(err, ErrNoKey):
			ctx.SetHeader("WWW-Authenticate", `Bearer realm="sandq", error="invalid_token"`)
			_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "unknown or revoked API key")
			return
		case errors.Is(err, errRate):
			ctx.SetHeader("Retry-After", "1")
			_ = huma.WriteErr(s.api, ctx, http.StatusTooManyRequests, fmt.Sprintf("rate limit of %d requests per second exceeded", s.rate(k)))
			return
		case err != nil:
			_ = huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable, "cannot read the API key", err)
			return
		}
	} else if err := s.count(ctx.Context(), rateID, s.cfg.RatePerSecond); err != nil {
		ctx.SetHeader("Retry-After", "1")
		_ = huma.WriteErr(s.api, ctx, http.StatusTooManyRequests, fmt.Sprintf("rate limit of %d requests per second exceeded", s.cfg.RatePerSecond))
		return
	}
	if !k.Has(need) {
		_ = huma.WriteErr(s.api, ctx, http.StatusForbidden, fmt.Sprintf("this API key lacks the %s scope", need))
		return
	}
	next(huma.WithValue(ctx, keyCtx{}, k))
}

var errRate = errors.New("api: rate limit exceeded")

// open reports whether a request without a key is served (Config.Open):
// only while no key exists. The key count is read at most once a second;
// once a key exists, every later request needs one, for the life of the
// process (revoking every key does not reopen it).
func (s *Server) open(ctx context.Context) bool {
	if !s.cfg.Open || s.closed.Load() {
		return false
	}
	now := time.Now().UnixNano()
	if now-s.openChecked.Load() < int64(time.Second) {
		return s.openNow.Load()
	}
	n := int64(0)
	var err error
	if s.cfg.Keys != nil {
		n, err = s.cfg.Keys.Count(ctx)
	}
	if n > 0 && !s.closed.Swap(true) {
		s.cfg.Logger.Info().Msg("an API key exists: every request now needs one")
	}
	s.openNow.Store(err == nil && n == 0) // an unreadable count is no permission
	s.openChecked.Store(now)
	return s.openNow.Load()
}

func (s *Server) rate(k Key) int {
	if k.RatePerSecond > 0 {
		return k.RatePerSecond
	}
	return s.cfg.RatePerSecond
}

func (s *Server) rateKey(id string) string {
	return fmt.Sprintf("%s:rate:%s:%d", s.cfg.Client.Store().Prefix(), id, time.Now().Unix())
}

// lookup reads the key's record and counts the request against its rate
// (a fixed one-second window per key, over every API process), in one
// round trip.
func (s *Server) lookup(ctx context.Context, token, rateID string) (Key, error) {
	if !strings.HasPrefix(token, "sqk_") || len(token) > 128 {
		return Key{}, ErrNoKey
	}
	rk := s.rateKey(rateID)
	var get *redis.StringCmd
	var incr *redis.IntCmd
	_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.cfg.Keys.recordKey(rateID))
		incr = p.Incr(ctx, rk)
		p.Expire(ctx, rk, 2*time.Second)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Key{}, err
	}
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return Key{}, ErrNoKey
	}
	if err != nil {
		return Key{}, err
	}
	var k Key
	if err := json.Unmarshal(b, &k); err != nil {
		return Key{}, err
	}
	if k.Hash != rateID {
		return Key{}, ErrNoKey
	}
	if incr.Val() > int64(s.rate(k)) {
		return k, errRate
	}
	return k, nil
}

// count counts a request of rateID against limit per second.
func (s *Server) count(ctx context.Context, rateID string, limit int) error {
	rk := s.rateKey(rateID)
	var incr *redis.IntCmd
	_, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, rk)
		p.Expire(ctx, rk, 2*time.Second)
		return nil
	})
	if err == nil && incr.Val() > int64(limit) {
		return errRate
	}
	return nil
}

// retryAfter formats seconds for a Retry-After header.
func retryAfter(d time.Duration) string { return strconv.Itoa(int(max(d.Seconds(), 1))) }
