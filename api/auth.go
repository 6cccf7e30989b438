package api

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/sandq/sandq/service"
)

type callerCtx struct{}

// callerOf returns the request's caller, set by authenticate.
func callerOf(ctx context.Context) service.Caller {
	c, _ := ctx.Value(callerCtx{}).(service.Caller)
	return c
}

// scope is the Operation.Metadata entry naming the scope an operation
// needs.
const scope = "scope"

// authenticate resolves the request's API key into its caller, checks the
// operation's scope and the key's rate, and puts the caller in the
// context: 401 without a valid key, 403 without the scope, 429 past the
// rate.
func (s *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	need, _ := ctx.Operation().Metadata[scope].(string)
	if need == "" {
		next(ctx)
		return
	}
	c, err := s.caller(ctx.Context(), ctx.Header("Authorization"), clientAddrOf(ctx))
	if err == nil && !c.Has(need) {
		err = &service.Error{Kind: service.Forbidden, Msg: "this API key lacks the " + need + " scope"}
	}
	if err != nil {
		for k, v := range authHeaders(err) {
			ctx.SetHeader(k, v[0])
		}
		_ = huma.WriteErr(s.api, ctx, status(err), detail(err), details(err)...)
		return
	}
	next(huma.WithValue(ctx, callerCtx{}, c))
}

// caller resolves an Authorization header: an API key's caller, or the
// open API's while it is open and no key is given. A client address that
// has failed too many authentications is refused (429) before its key is
// looked up, unless that key authenticated within goodKeyTTL (an address
// may be a NAT or a proxy, shared with whoever is failing).
func (s *Server) caller(ctx context.Context, auth, addr string) (service.Caller, error) {
	if auth == "" && s.svc.OpenAllowed(ctx) {
		return service.Open(), s.svc.CountOpen(ctx)
	}
	token, ok := strings.CutPrefix(auth, "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return service.Caller{}, &service.Error{Kind: service.Unauthorized, Msg: "an API key is required: Authorization: Bearer <key>"}
	}
	if s.auths.blocked(addr, token) {
		return service.Caller{}, &service.Error{Kind: service.TooMany, RetryAfter: time.Second,
			Msg: "too many failed authentications from this address; try again later"}
	}
	c, err := s.svc.Authenticate(ctx, token)
	switch {
	case err == nil:
		s.auths.vouch(token)
	case service.KindOf(err) == service.Unauthorized:
		s.auths.failed(addr)
		s.auths.forget(token)
	}
	return c, err
}

// clientAddrOf is the client address of a huma request.
func clientAddrOf(ctx huma.Context) string {
	host, _, err := net.SplitHostPort(ctx.RemoteAddr())
	if err != nil {
		return ctx.RemoteAddr()
	}
	return host
}

// authHeaders are the headers of an authentication failure: the bearer
// challenge of a 401 and the Retry-After of a 429.
func authHeaders(err error) http.Header {
	h := http.Header{}
	var e *service.Error
	if !errorAs(err, &e) {
		return h
	}
	switch {
	case e.Kind == service.Unauthorized && strings.HasPrefix(e.Msg, "an API key is required"):
		h.Set("WWW-Authenticate", `Bearer realm="sandq"`)
	case e.Kind == service.Unauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="sandq", error="invalid_token"`)
	case e.RetryAfter > 0:
		h.Set("Retry-After", retryAfter(e.RetryAfter))
	}
	return h
}

// Scopes an API key may hold (the service's).
const (
	ScopeRead  = service.ScopeRead
	ScopeWrite = service.ScopeWrite
)
