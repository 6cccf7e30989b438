package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/mcpserver"
	"github.com/sandq/sandq/service"
)

// The MCP endpoint: mcpserver's tools over Streamable HTTP at /mcp, behind
// the API's keys. Every POST, GET and DELETE of /mcp authenticates as a
// REST request does (401 without a valid key, 429 past its rate); the
// tools then act for the key's tenant with its scopes and caps, through
// the same checks as the REST operations (mcpBackend). An MCP session is
// bound to the key that opened it: another key's requests to it are 403.

// mcpCaller carries the request's caller from authentication to the
// tools.
const mcpCaller = "sandq_caller"

// mountMCP serves the MCP endpoint on the mux.
func (s *Server) mountMCP() error {
	srv, err := mcpserver.New(mcpserver.Config{
		Backend: s.mcpBackend, Service: s.svc, MaxWait: s.cfg.MCPMaxWait,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	s.mcpServer = srv
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: s.cfg.MCPSessionIdle, MaxRequestBodyBytes: s.cfg.MaxJobBytes})
	verify := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, ok := r.Context().Value(callerCtx{}).(service.Caller)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: c.KeyHash, Scopes: c.Scopes, Extra: map[string]any{mcpCaller: c}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	keyed := verify(h)
	s.mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.caller(r.Context(), r.Header.Get("Authorization"), clientAddr(r))
		if err != nil {
			writeProblem(w, err)
			return
		}
		if r.Method == http.MethodPost && !s.checkMCPBody(w, r) {
			return
		}
		// Each MCP session holds memory until it is closed or idle for
		// the timeout: a new one past the process's cap, or its tenant's
		// share of it, waits for one to go. Opening and counting are one
		// step (the lock), so parallel opens do not pass the caps.
		opening := r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == ""
		if opening {
			s.mcpMu.Lock()
			total, mine := s.mcpSessions(c.Tenant)
			switch {
			case total >= s.cfg.MaxMCPSessions:
				s.mcpMu.Unlock()
				writeProblem(w, &service.Error{Kind: service.Unavailable, RetryAfter: 5 * time.Second,
					Msg: fmt.Sprintf("this API process has %d MCP sessions open, its cap (--max-mcp-sessions); retry later", total)})
				return
			case mine >= s.cfg.MaxMCPSessionsPerTenant:
				s.mcpMu.Unlock()
				s.svc.Refused(c.Tenant, service.QuotaMCPSessions)
				writeProblem(w, &service.Error{Kind: service.TooMany, RetryAfter: 5 * time.Second, Quota: service.QuotaMCPSessions,
					Msg: fmt.Sprintf("the tenant has %d MCP sessions open in this process; its cap is %d: close one first", mine, s.cfg.MaxMCPSessionsPerTenant)})
				return
			}
			// Held while this request opens the session: a parallel
			// open counts it.
			s.mcpOpening[c.Tenant]++
			s.mcpMu.Unlock()
		}
		r = r.WithContext(context.WithValue(r.Context(), callerCtx{}, c))
		rec := &sessionIDRecorder{ResponseWriter: w}
		if opening {
			// The place held while opening is handed over when the
			// response's headers go out: to the session, if they name
			// one (an initialize), or given back (server/discover, ping,
			// a refused initialize). The client sends its next request
			// as soon as it reads them, before this handler returns and
			// before the SDK closes the session it made for a request
			// that opened none: counted until then, that request would
			// take a second place and refuse a session under the cap.
			released := false
			release := func(id string) { // with mcpMu
				if released {
					return
				}
				released = true
				if s.mcpOpening[c.Tenant]--; s.mcpOpening[c.Tenant] <= 0 {
					delete(s.mcpOpening, c.Tenant)
				}
				if id != "" {
					s.mcpTenants[id] = c.Tenant
				}
			}
			rec.opened = func(id string) {
				s.mcpMu.Lock()
				defer s.mcpMu.Unlock()
				release(id)
			}
			defer func() {
				s.mcpMu.Lock()
				defer s.mcpMu.Unlock()
				// Headers never sent (the client went away): the SDK
				// sets the session's ID in them before it runs the
				// initialize, and such a session lives until it is idle
				// for MCPSessionIdle: it counts.
				release(rec.Header().Get("Mcp-Session-Id"))
			}()
		}
		if c.IsOpen() {
			h.ServeHTTP(rec, r) // open mode: no token to bind the session to
		} else {
			keyed.ServeHTTP(rec, r)
		}

	}))
	return nil
}

// checkMCPBody reads a POST's JSON-RPC message (at most MaxJobBytes) and
// answers what the SDK would refuse in plain text, or by ending the
// session, with a JSON-RPC error as the stdio door does: a body past the
// cap (413, naming it), one that is not JSON (-32700) or not a JSON-RPC
// 2.0 message, a batch included (-32600), each a 400, and a request for
// a method no MCP server has (-32601, 200). It puts a message
// the SDK can take back as r's body and reports whether to go on.
func (s *Server) checkMCPBody(w http.ResponseWriter, r *http.Request) bool {
	limit := s.cfg.MaxJobBytes
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	_ = r.Body.Close()
	if err != nil {
		writeProblem(w, &service.Error{Kind: service.BadRequest, Msg: "reading the request body: " + err.Error()})
		return false
	}
	answer := func(status int, msg []byte) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(msg)
		return false
	}
	if int64(len(body)) > limit {
		return answer(http.StatusRequestEntityTooLarge,
			mcpserver.TooLarge(body[:min(len(body), 4096)], int(max(r.ContentLength, limit+1)), int(limit), "the API's --max-job-bytes"))
	}
	if msg := mcpserver.CheckMessage(body); msg != nil {
		return answer(http.StatusBadRequest, msg)
	}
	if msg := mcpserver.UnknownMethod(body); msg != nil {
		return answer(http.StatusOK, msg)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

// mcpSessions counts the MCP sessions open in this process, all and
// tenant's, the requests that may open one too; it forgets the sessions
// that have closed. A session counts from the response that gave out its
// ID (the SDK lists it earlier, and lists for the length of their request
// the sessions it makes for requests that open none). Call with mcpMu.
func (s *Server) mcpSessions(tenant string) (total, mine int) {
	for _, n := range s.mcpOpening {
		total += n
	}
	mine = s.mcpOpening[tenant]
	live := map[string]bool{}
	for ss := range s.mcpServer.Sessions() {
		live[ss.ID()] = true
	}
	for id, t := range s.mcpTenants {
		switch {
		case !live[id]:
			delete(s.mcpTenants, id)
		case t == tenant:
			total++
			mine++
		default:
			total++
		}
	}
	return total, mine
}

// sessionIDRecorder tells opened the MCP session ID a response gives ("" if
// none), as its headers go out.
type sessionIDRecorder struct {
	http.ResponseWriter
	opened func(id string)
	seen   bool
}

func (r *sessionIDRecorder) note() {
	if !r.seen && r.opened != nil {
		r.seen = true
		r.opened(r.Header().Get("Mcp-Session-Id"))
	}
}

func (r *sessionIDRecorder) WriteHeader(code int) {
	r.note()
	r.ResponseWriter.WriteHeader(code)
}

func (r *sessionIDRecorder) Write(b []byte) (int, error) {
	r.note()
	return r.ResponseWriter.Write(b)
}

// Flush passes a flush on (MCP streams its answers).
func (r *sessionIDRecorder) Flush() {
	r.note()
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (r *sessionIDRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// writeProblem writes err as an RFC 9457 problem, from a plain handler.
func writeProblem(w http.ResponseWriter, err error) {
	for k, v := range authHeaders(err) {
		w.Header()[k] = v
	}
	code := status(err)
	m := &huma.ErrorModel{Type: problemType, Title: http.StatusText(code), Status: code, Detail: detail(err)}
	for _, d := range details(err) {
		if ed, ok := d.(*huma.ErrorDetail); ok {
			m.Errors = append(m.Errors, ed)
		} else {
			m.Errors = append(m.Errors, &huma.ErrorDetail{Message: d.Error()})
		}
	}
	if e, ok := errors.AsType[*service.Error](err); ok && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfter(e.RetryAfter))
	}
	b, _ := json.Marshal(m)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// mcpBackend is the tools' backend for the caller of a request.
func (s *Server) mcpBackend(ctx context.Context, extra *mcp.RequestExtra) (mcpserver.Backend, error) {
	if extra != nil && extra.TokenInfo != nil {
		if c, ok := extra.TokenInfo.Extra[mcpCaller].(service.Caller); ok {
			return mcpserver.ServiceBackend{Service: s.svc, Caller: c}, nil
		}
	}
	if s.svc.OpenAllowed(ctx) {
		return mcpserver.ServiceBackend{Service: s.svc, Caller: service.Open()}, nil
	}
	return nil, errors.New("an API key is required")
}
