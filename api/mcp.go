package api

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandq/sandq/client"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/mcpserver"
)

// The MCP endpoint: mcpserver's tools over Streamable HTTP at /mcp, behind
// the API's keys. Every POST, GET and DELETE of /mcp authenticates as a
// REST request does (401 without a valid key, 429 past its rate); the
// tools then act for the key's tenant with its scopes and caps, through
// the same checks as the REST operations (mcpBackend). An MCP session is
// bound to the key that opened it: another key's requests to it are 403.

// mcpKey carries the request's key from authentication to the tools.
const mcpKey = "sandq_key"

// mountMCP serves the MCP endpoint on the mux.
func (s *Server) mountMCP() error {
	srv, err := mcpserver.New(mcpserver.Config{
		Backend: s.mcpBackend, Store: s.cfg.Client.Store(), MaxWait: s.cfg.MCPMaxWait,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: s.cfg.MCPSessionIdle, MaxRequestBodyBytes: s.cfg.MaxJobBytes})
	verify := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		k, ok := r.Context().Value(keyCtx{}).(Key)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: k.Hash, Scopes: k.Scopes, Extra: map[string]any{mcpKey: k}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	keyed := verify(h)
	s.mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, ok := s.authenticateHTTP(w, r)
		if !ok {
			return
		}
		// Each MCP session holds memory until it is closed or idle for
		// the timeout: a new one past the cap waits for one to go.
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			n := 0
			for range srv.Sessions() {
				n++
			}
			if n >= s.cfg.MaxMCPSessions {
				w.Header().Set("Retry-After", "5")
				http.Error(w, fmt.Sprintf("this API process has %d MCP sessions open, its cap (--max-mcp-sessions); retry later", n), http.StatusServiceUnavailable)
				return
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), keyCtx{}, k))
		if k.ID == openKey.ID {
			h.ServeHTTP(w, r) // open mode: no token to bind the session to
			return
		}
		keyed.ServeHTTP(w, r)
	}))
	return nil
}

// authenticateHTTP is authenticate for a plain handler: the request's key
// (openKey in open mode), or false after writing 401, 429 or 503.
func (s *Server) authenticateHTTP(w http.ResponseWriter, r *http.Request) (Key, bool) {
	fail := func(code int, msg string) (Key, bool) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"title":%q,"status":%d,"detail":%q}`+"\n", http.StatusText(code), code, msg)
		return Key{}, false
	}
	auth := r.Header.Get("Authorization")
	if auth == "" && s.open(r.Context()) {
		if err := s.count(r.Context(), "open", s.cfg.RatePerSecond); err != nil {
			w.Header().Set("Retry-After", "1")
			return fail(http.StatusTooManyRequests, fmt.Sprintf("rate limit of %d requests per second exceeded", s.cfg.RatePerSecond))
		}
		return openKey, true
	}
	token, ok := strings.CutPrefix(auth, "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandq"`)
		return fail(http.StatusUnauthorized, "an API key is required: Authorization: Bearer <key>")
	}
	k, err := s.lookup(r.Context(), token, hashKey(token))
	switch {
	case errors.Is(err, ErrNoKey):
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandq", error="invalid_token"`)
		return fail(http.StatusUnauthorized, "unknown or revoked API key")
	case errors.Is(err, errRate):
		w.Header().Set("Retry-After", "1")
		return fail(http.StatusTooManyRequests, fmt.Sprintf("rate limit of %d requests per second exceeded", s.rate(k)))
	case err != nil:
		return fail(http.StatusServiceUnavailable, "cannot read the API key: "+err.Error())
	}
	return k, true
}

// mcpBackend is the tools' backend for the key of a request.
func (s *Server) mcpBackend(ctx context.Context, extra *mcp.RequestExtra) (mcpserver.Backend, error) {
	if extra != nil && extra.TokenInfo != nil {
		if k, ok := extra.TokenInfo.Extra[mcpKey].(Key); ok {
			return &mcpBackend{s: s, k: k}, nil
		}
	}
	if s.open(ctx) {
		return &mcpBackend{s: s, k: openKey}, nil
	}
	return nil, errors.New("an API key is required")
}

// mcpBackend does the tools' work for key k, with the checks of the REST
// operations: scopes, the tenant's IDs, the key's caps, the tenant's
// quotas.
type mcpBackend struct {
	s *Server
	k Key
}

var _ mcpserver.Backend = (*mcpBackend)(nil)

func (b *mcpBackend) need(scope string) error {
	if !b.k.Has(scope) {
		return fmt.Errorf("this API key lacks the %s scope", scope)
	}
	return nil
}

// problem is err as the tools' caller reads it: a huma problem's detail
// and its errors, the tenant's ID prefix left out.
func (b *mcpBackend) problem(err error) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return &jobs.ValidationError{Field: ve.Field, Msg: b.clean(ve.Msg)}
	}
	var em *huma.ErrorModel
	if !errors.As(err, &em) {
		return errors.New(b.clean(err.Error()))
	}
	msg := em.Detail
	for _, d := range em.Errors {
		loc := strings.TrimPrefix(strings.TrimPrefix(d.Location, "arguments."), "arguments")
		switch {
		case loc != "":
			msg += "; " + loc + ": " + d.Message
		case d.Message != "":
			msg += ": " + d.Message
		}
	}
	if em.Status == http.StatusUnprocessableEntity {
		msg = "invalid request: " + msg
	}
	return errors.New(b.clean(msg))
}

func (b *mcpBackend) clean(msg string) string {
	return strings.ReplaceAll(msg, tenantPrefix(b.k.Tenant), "")
}

func (b *mcpBackend) Enqueue(ctx context.Context, job jobs.Job) (string, error) {
	if err := b.need(ScopeWrite); err != nil {
		return "", err
	}
	job, _, err := b.s.prepare(ctx, b.k, JobRequest{Job: job}, "arguments")
	if err != nil {
		return "", b.problem(err)
	}
	if err := b.s.admit(ctx, b.k, 1); err != nil {
		return "", b.problem(err)
	}
	info, err := b.s.cfg.Client.Enqueue(ctx, job)
	if err != nil {
		return "", b.problem(err)
	}
	b.s.track(ctx, b.k.Tenant, info.ID)
	return externalID(b.k.Tenant, info.ID), nil
}

func (b *mcpBackend) Job(ctx context.Context, id string, wait time.Duration) (jobs.Result, error) {
	if err := b.need(ScopeRead); err != nil {
		return jobs.Result{}, err
	}
	r, err := b.s.await(ctx, internalID(b.k.Tenant, id), wait)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return r, fmt.Errorf("no job %s", id)
	case err != nil:
		return r, b.problem(err)
	}
	r.ID = externalID(b.k.Tenant, r.ID)
	r.Reason = b.clean(r.Reason)
	return r, nil
}

func (b *mcpBackend) Cancel(ctx context.Context, id string) error {
	if err := b.need(ScopeWrite); err != nil {
		return err
	}
	err := b.s.cfg.Client.Cancel(ctx, internalID(b.k.Tenant, id))
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return fmt.Errorf("no job %s", id)
	case errors.Is(err, jobs.ErrAlreadyFinal):
		return fmt.Errorf("job %s has already ended", id)
	case err != nil:
		return b.problem(err)
	}
	return nil
}

func (b *mcpBackend) Artifact(ctx context.Context, id, name string, max int64) (jobs.Artifact, []byte, error) {
	if err := b.need(ScopeRead); err != nil {
		return jobs.Artifact{}, nil, err
	}
	r, err := b.s.readJob(ctx, b.k, id)
	if err != nil {
		return jobs.Artifact{}, nil, b.problem(err)
	}
	for _, a := range r.Artifacts {
		if a.Name == name {
			data, err := media.Read(ctx, a.URL, b.s.cfg.ArtifactDir, max)
			if err != nil {
				return a, nil, fmt.Errorf("artifact %q of job %s: %w", name, id, err)
			}
			return a, data, nil
		}
	}
	return jobs.Artifact{}, nil, fmt.Errorf("job %s has no artifact %q", id, name)
}

func (b *mcpBackend) OpenSession(ctx context.Context, spec jobs.SessionSpec) (jobs.SessionInfo, error) {
	if err := b.need(ScopeWrite); err != nil {
		return jobs.SessionInfo{}, err
	}
	info, err := b.s.openSession(ctx, b.k, spec, "arguments")
	if err != nil {
		return info, b.problem(err)
	}
	return info, nil
}

// session is the tenant's session id, for an operation that needs scope.
func (b *mcpBackend) session(ctx context.Context, id, scope string) (*client.Session, error) {
	if err := b.need(scope); err != nil {
		return nil, err
	}
	sess, _, err := b.s.session(ctx, b.k, id)
	if err != nil {
		return nil, b.problem(err)
	}
	return sess, nil
}

func (b *mcpBackend) Exec(ctx context.Context, id string, cell jobs.Cell) (jobs.CellResult, error) {
	sess, err := b.session(ctx, id, ScopeWrite)
	if err != nil {
		return jobs.CellResult{}, err
	}
	r, err := sess.Exec(ctx, cell)
	if err != nil {
		return r, b.problem(b.s.sessionError(ctx, b.k, id, "arguments", err))
	}
	r.Reason = b.clean(r.Reason)
	return r, nil
}

func (b *mcpBackend) Upload(ctx context.Context, id, path string, data []byte) error {
	if err := jobs.ValidSessionPath(path, false); err != nil {
		return b.problem(asField(err, "path"))
	}
	sess, err := b.session(ctx, id, ScopeWrite)
	if err != nil {
		return err
	}
	if err := sess.Upload(ctx, path, data); err != nil {
		return b.problem(b.s.sessionError(ctx, b.k, id, "arguments.path", asField(err, "")))
	}
	return nil
}

func (b *mcpBackend) Download(ctx context.Context, id, path string) ([]byte, error) {
	if err := jobs.ValidSessionPath(path, false); err != nil {
		return nil, b.problem(asField(err, "path"))
	}
	sess, err := b.session(ctx, id, ScopeRead)
	if err != nil {
		return nil, err
	}
	data, err := sess.Download(ctx, path)
	if err != nil {
		return nil, b.problem(b.s.sessionError(ctx, b.k, id, "arguments.path", asField(err, "")))
	}
	return data, nil
}

func (b *mcpBackend) Files(ctx context.Context, id, dir string) ([]jobs.FileEntry, error) {
	if err := jobs.ValidSessionPath(dir, true); err != nil {
		return nil, b.problem(asField(err, "dir"))
	}
	sess, err := b.session(ctx, id, ScopeRead)
	if err != nil {
		return nil, err
	}
	files, err := sess.Files(ctx, dir)
	if err != nil {
		return nil, b.problem(b.s.sessionError(ctx, b.k, id, "arguments.dir", asField(err, "")))
	}
	return files, nil
}

func (b *mcpBackend) CloseSession(ctx context.Context, id string) (jobs.SessionInfo, error) {
	sess, err := b.session(ctx, id, ScopeWrite)
	if err != nil {
		return jobs.SessionInfo{}, err
	}
	if err := sess.Close(ctx); err != nil {
		return jobs.SessionInfo{}, b.problem(b.s.sessionError(ctx, b.k, id, "", err))
	}
	info, err := sess.Info(ctx)
	if err != nil {
		return info, b.problem(b.s.sessionError(ctx, b.k, id, "", err))
	}
	return sessionView(b.k, info), nil
}
