package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/sandq/sandq/client"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/sandq/sandq/jobs"
)

// Sessions: a live interpreter in one container, run cell by cell (see
// jobs.SessionSpec). A session's ID is namespaced per tenant like a job's
// (stored as internalID(tenant, id)), and its record names its tenant, so
// another tenant's session is 404 however its ID is spelled.

// SessionIDParam is a session's ID in a path.
type SessionIDParam struct {
	ID string `path:"id" minLength:"1" maxLength:"114" pattern:"^[A-Za-z0-9_.:-]+$" doc:"the session's ID"`
}

// SessionPathParam is a path in a session's work dir, in a path.
type SessionPathParam struct {
	Path string `path:"path" minLength:"1" maxLength:"1024" doc:"the file's path relative to the session's work dir; its slashes may be sent as they are or escaped (%2F)"`
}

// SessionList answers GET /v1/sessions.
type SessionList struct {
	Sessions []jobs.SessionInfo `json:"sessions" doc:"the tenant's sessions, newest first, ended ones while their records last (an hour)"`
}

// SessionFiles answers GET /v1/sessions/{id}/files.
type SessionFiles struct {
	Files []jobs.FileEntry `json:"files" doc:"every file and directory under dir, recursively, sorted by path"`
}

type sessionOutput struct {
	Location string `header:"Location"`
	Body     jobs.SessionInfo
}

type sessionInfoOutput struct{ Body jobs.SessionInfo }

// sessionRetryAfter is the Retry-After of a 503 for want of a session
// slot.
const sessionRetryAfter = "5"

func (s *Server) registerSessions() {
	huma.Register(s.api, huma.Operation{
		OperationID: "create-session", Method: http.MethodPost, Path: "/v1/sessions", Tags: []string{"sessions"},
		Summary: "Open a session: a live interpreter, run cell by cell",
		Description: "Validates the spec against the operator's policy and the key's caps, claims a free session slot of a live " +
			"worker, and starts the session there: the container, the libraries, the files, the interpreter. Answers 201 with the " +
			"session once it is ready (this can take minutes with libraries). 409 if the tenant has a session with this ID (or had " +
			"one within the last hour); 503 with Retry-After when every worker is at its --max-sessions or none takes sessions.",
		MaxBodyBytes: s.cfg.MaxJobBytes, Metadata: map[string]any{scope: ScopeWrite},
		Errors: []int{401, 403, 409, 413, 422, 429, 503, 504}, DefaultStatus: http.StatusCreated,
	}, func(ctx context.Context, in *struct{ Body jobs.SessionSpec }) (*sessionOutput, error) {
		k := keyOf(ctx)
		info, err := s.openSession(ctx, k, in.Body, "body")
		if err != nil {
			return nil, err
		}
		return &sessionOutput{Location: "/v1/sessions/" + url.PathEscape(info.ID), Body: info}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "list-sessions", Method: http.MethodGet, Path: "/v1/sessions", Tags: []string{"sessions"},
		Summary:  "List the tenant's sessions",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 429, 503},
	}, func(ctx context.Context, _ *struct{}) (*struct{ Body SessionList }, error) {
		k := keyOf(ctx)
		list, err := s.cfg.Client.Sessions(ctx, k.Tenant)
		if err != nil {
			return nil, huma.Error503ServiceUnavailable("cannot list the sessions", err)
		}
		out := &struct{ Body SessionList }{SessionList{Sessions: []jobs.SessionInfo{}}}
		for _, info := range list {
			out.Body.Sessions = append(out.Body.Sessions, sessionView(k, info))
		}
		return out, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-session", Method: http.MethodGet, Path: "/v1/sessions/{id}", Tags: []string{"sessions"},
		Summary:     "Read a session",
		Description: "The session's record: its state (starting, ready; or closed, expired, lost, oom once it has ended, with the reason), cells run, times. An ended session's record is kept an hour.",
		Metadata:    map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429, 503},
	}, func(ctx context.Context, in *struct{ SessionIDParam }) (*sessionInfoOutput, error) {
		k := keyOf(ctx)
		_, info, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		return &sessionInfoOutput{Body: sessionView(k, info)}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "close-session", Method: http.MethodDelete, Path: "/v1/sessions/{id}", Tags: []string{"sessions"},
		Summary:     "Close a session",
		Description: "Ends the session and removes its container; answers with its final record. Closing a session that has already ended answers its record as it is.",
		Metadata:    map[string]any{scope: ScopeWrite}, Errors: []int{401, 403, 404, 429, 503, 504},
	}, func(ctx context.Context, in *struct{ SessionIDParam }) (*sessionInfoOutput, error) {
		k := keyOf(ctx)
		sess, _, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		if err := sess.Close(ctx); err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "", err)
		}
		info, err := sess.Info(ctx)
		if err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "", err)
		}
		return &sessionInfoOutput{Body: sessionView(k, info)}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "exec-cell", Method: http.MethodPost, Path: "/v1/sessions/{id}/cells", Tags: []string{"sessions"},
		Summary: "Run a cell",
		Description: "Runs the code in the session's interpreter, its state kept from the cells before, and answers its CellResult " +
			"once it has ended: 200 whatever the cell did (status ok, error, timeout, or session_ended when the interpreter died " +
			"during it). 409 while another cell runs (one at a time); 410 when the session has ended (the problem's errors name its " +
			"state and reason). The request lasts as long as the cell: up to its timeout_ms (default: the session's timeout).",
		MaxBodyBytes: s.cfg.MaxJobBytes, Metadata: map[string]any{scope: ScopeWrite},
		Errors: []int{401, 403, 404, 409, 410, 413, 422, 429, 503, 504},
	}, func(ctx context.Context, in *struct {
		SessionIDParam
		Body jobs.Cell
	}) (*struct{ Body jobs.CellResult }, error) {
		k := keyOf(ctx)
		sess, _, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		r, err := sess.Exec(ctx, in.Body)
		if ve, ok := errors.AsType[*jobs.ValidationError](err); ok {
			err = asField(err, strings.TrimPrefix(ve.Field, "cell."))
		}
		if err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "body", err)
		}
		r.Reason = strings.ReplaceAll(r.Reason, tenantPrefix(k.Tenant), "")
		return &struct{ Body jobs.CellResult }{r}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "interrupt-session", Method: http.MethodPost, Path: "/v1/sessions/{id}/interrupt", Tags: []string{"sessions"},
		Summary:     "Interrupt the running cell",
		Description: "Interrupts the cell that runs, if any (KeyboardInterrupt in Python): it ends with status error and the session lives on. Answers 202 with the session's record.",
		Metadata:    map[string]any{scope: ScopeWrite}, Errors: []int{401, 403, 404, 410, 429, 503, 504}, DefaultStatus: http.StatusAccepted,
	}, func(ctx context.Context, in *struct{ SessionIDParam }) (*sessionInfoOutput, error) {
		k := keyOf(ctx)
		sess, _, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		if err := sess.Interrupt(ctx); err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "", err)
		}
		info, err := sess.Info(ctx)
		if err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "", err)
		}
		return &sessionInfoOutput{Body: sessionView(k, info)}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "list-session-files", Method: http.MethodGet, Path: "/v1/sessions/{id}/files", Tags: []string{"sessions"},
		Summary:  "List a session's files",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 409, 410, 422, 429, 503, 504},
	}, func(ctx context.Context, in *struct {
		SessionIDParam
		Dir string `query:"dir" maxLength:"1024" doc:"a directory of the work dir (default: the work dir itself)"`
	}) (*struct{ Body SessionFiles }, error) {
		k := keyOf(ctx)
		if err := jobs.ValidSessionPath(in.Dir, true); err != nil {
			return nil, invalidError("invalid dir", asField(err, ""), "query.dir", k.Tenant)
		}
		sess, _, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		files, err := sess.Files(ctx, in.Dir)
		if err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "query.dir", asField(err, ""))
		}
		out := &struct{ Body SessionFiles }{SessionFiles{Files: files}}
		if out.Body.Files == nil {
			out.Body.Files = []jobs.FileEntry{}
		}
		return out, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "put-session-file", Method: http.MethodPut, Path: "/v1/sessions/{id}/files/{path}", Tags: []string{"sessions"},
		Summary: "Upload a file into a session",
		Description: fmt.Sprintf("Writes the request body, as it is, to the path in the session's work dir (directories made as "+
			"needed; an existing file is replaced). At most %d bytes (413 past it). 422 for a path that would leave the work dir.", jobs.MaxSessionFileBytes),
		MaxBodyBytes: jobs.MaxSessionFileBytes, Metadata: map[string]any{scope: ScopeWrite, wildcard: "path"},
		Errors: []int{401, 403, 404, 409, 410, 413, 422, 429, 503, 504}, DefaultStatus: http.StatusNoContent,
	}, func(ctx context.Context, in *struct {
		SessionIDParam
		SessionPathParam
		RawBody []byte
	}) (*struct{}, error) {
		k := keyOf(ctx)
		if err := jobs.ValidSessionPath(in.Path, false); err != nil {
			return nil, invalidError("invalid path", asField(err, ""), "path.path", k.Tenant)
		}
		sess, _, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		if err := sess.Upload(ctx, in.Path, in.RawBody); err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "path.path", asField(err, ""))
		}
		return nil, nil
	})
	// An empty body is an empty file.
	if op := s.api.OpenAPI().Paths["/v1/sessions/{id}/files/{path}"]; op != nil && op.Put != nil && op.Put.RequestBody != nil {
		op.Put.RequestBody.Required = false
	}

	huma.Register(s.api, huma.Operation{
		OperationID: "get-session-file", Method: http.MethodGet, Path: "/v1/sessions/{id}/files/{path}", Tags: []string{"sessions"},
		Summary:     "Download a file from a session",
		Description: fmt.Sprintf("A regular file of the session's work dir, as an attachment (at most %d bytes).", jobs.MaxSessionFileBytes),
		Metadata:    map[string]any{scope: ScopeRead, wildcard: "path"}, Errors: []int{401, 403, 404, 409, 410, 422, 429, 503, 504},
		Responses: map[string]*huma.Response{
			"200": {Description: "The file", Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}}}},
		},
	}, func(ctx context.Context, in *struct {
		SessionIDParam
		SessionPathParam
	}) (*huma.StreamResponse, error) {
		k := keyOf(ctx)
		if err := jobs.ValidSessionPath(in.Path, false); err != nil {
			return nil, invalidError("invalid path", asField(err, ""), "path.path", k.Tenant)
		}
		sess, _, err := s.session(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		data, err := sess.Download(ctx, in.Path)
		if err != nil {
			return nil, s.sessionError(ctx, k, in.ID, "path.path", asField(err, ""))
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			hctx.SetHeader("Content-Type", "application/octet-stream")
			hctx.SetHeader("X-Content-Type-Options", "nosniff")
			hctx.SetHeader("Content-Disposition", `attachment; filename="`+strings.NewReplacer(`"`, "", `\`, "").Replace(path.Base(in.Path))+`"`)
			hctx.SetHeader("Content-Length", strconv.Itoa(len(data)))
			hctx.SetStatus(http.StatusOK)
			_, _ = hctx.BodyWriter().Write(data)
		}}, nil
	})
}

// openSession validates spec for the key (where is its location in the
// request, for 422), claims a slot and starts the session; it returns the
// session's record as the tenant sees it.
func (s *Server) openSession(ctx context.Context, k Key, spec jobs.SessionSpec, where string) (jobs.SessionInfo, error) {
	if spec.Tenant != "" {
		return jobs.SessionInfo{}, huma.Error422UnprocessableEntity("invalid session", &huma.ErrorDetail{
			Location: where + ".tenant", Message: "the tenant is the API key's; leave tenant out", Value: spec.Tenant})
	}
	if len(spec.ID) > MaxClientIDBytes {
		return jobs.SessionInfo{}, huma.Error422UnprocessableEntity("invalid session", &huma.ErrorDetail{
			Location: where + ".id", Message: fmt.Sprintf("is %d bytes; the cap is %d", len(spec.ID), MaxClientIDBytes), Value: spec.ID})
	}
	id := spec.ID
	if id == "" {
		id = jobs.NewID()
	}
	spec.ID, spec.Tenant = internalID(k.Tenant, id), k.Tenant
	if err := s.policyFor(k).ValidateSession(&spec); err != nil {
		return jobs.SessionInfo{}, invalidError("invalid session", err, where, k.Tenant)
	}
	capLimitsOf(&spec.Limits, k)
	if err := s.admitSession(ctx, k); err != nil {
		return jobs.SessionInfo{}, err
	}
	sess, err := s.cfg.Client.OpenSession(ctx, spec)
	if err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, k, id, where, err)
	}
	info, err := sess.Info(ctx)
	if err != nil {
		return jobs.SessionInfo{}, s.sessionError(ctx, k, id, "", err)
	}
	return sessionView(k, info), nil
}

// session returns a handle on the tenant's session id and its record: 404
// when the tenant has none of this ID (another tenant's included).
func (s *Server) session(ctx context.Context, k Key, id string) (*client.Session, jobs.SessionInfo, error) {
	info, err := s.cfg.Client.SessionInfo(ctx, internalID(k.Tenant, id))
	if err == nil && info.Tenant != k.Tenant {
		err = jobs.ErrSessionNotFound
	}
	if err != nil {
		return nil, info, s.sessionError(ctx, k, id, "", err)
	}
	sess, err := s.cfg.Client.Session(ctx, info.ID)
	if err != nil {
		return nil, info, s.sessionError(ctx, k, id, "", err)
	}
	return sess, info, nil
}

// sessionView is info as the tenant sees it: its own ID.
func sessionView(k Key, info jobs.SessionInfo) jobs.SessionInfo {
	info.ID = externalID(k.Tenant, info.ID)
	info.Reason = strings.ReplaceAll(info.Reason, tenantPrefix(k.Tenant), "")
	return info
}

// asField names the field of a validation error without one (a path
// checked by jobs.ValidSessionPath names "path"): the location given to
// invalidError says it all.
func asField(err error, field string) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return &jobs.ValidationError{Field: field, Msg: ve.Msg}
	}
	return err
}

// sessionError maps the error of an operation on the tenant's session id
// (as the tenant knows it) to its answer; where is the request's location
// of the operation's input, for 422.
func (s *Server) sessionError(ctx context.Context, k Key, id, where string, err error) error {
	var se *jobs.SessionError
	errors.As(err, &se)
	clean := func(msg string) string { return strings.ReplaceAll(msg, tenantPrefix(k.Tenant), "") }
	switch {
	case errors.Is(err, jobs.ErrSessionNotFound):
		return huma.Error404NotFound("no session " + id)
	case errors.Is(err, jobs.ErrSessionBusy):
		return huma.Error409Conflict("session " + id + " is running a cell: one runs at a time (interrupt it, or wait for it)")
	case errors.Is(err, jobs.ErrSessionExists):
		return huma.Error409Conflict("the tenant has a session " + id + " (or had one within the last hour)")
	case errors.Is(err, jobs.ErrSessionEnded), errors.Is(err, jobs.ErrSessionLost):
		state, reason := jobs.SessionClosed, ""
		if errors.Is(err, jobs.ErrSessionLost) {
			state = jobs.SessionLost
		}
		if se != nil {
			if se.State != "" {
				state = se.State
			}
			reason = clean(se.Reason)
		}
		msg := fmt.Sprintf("session %s has ended (%s)", id, state)
		if reason != "" {
			msg += ": " + reason
		}
		return huma.Error410Gone(msg, &huma.ErrorDetail{Location: "session.state", Message: reason, Value: state})
	case errors.Is(err, jobs.ErrNoSessionSlots):
		return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable("no free session slot: every worker has --max-sessions sessions open, or none takes sessions; retry later"),
			http.Header{"Retry-After": {sessionRetryAfter}})
	}
	if _, ok := errors.AsType[*jobs.ValidationError](err); ok {
		return invalidError("invalid request", err, cmp.Or(where, "body"), k.Tenant)
	}
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return huma.Error504GatewayTimeout("the session's worker did not answer in time", errors.New(clean(err.Error())))
	}
	return huma.Error503ServiceUnavailable("the session operation failed", errors.New(clean(err.Error())))
}

// admitSession refuses a create (429) when the tenant already has
// MaxSessions sessions not ended: one tenant cannot take every worker's
// slots. Sessions being created count (their records exist from the
// claim on).
func (s *Server) admitSession(ctx context.Context, k Key) error {
	list, err := s.cfg.Client.Sessions(ctx, k.Tenant)
	if err != nil {
		return huma.Error503ServiceUnavailable("cannot count the tenant's sessions", err)
	}
	live := 0
	for _, info := range list {
		if !info.State.Final() {
			live++
		}
	}
	if live >= s.cfg.MaxSessions {
		return huma.Error429TooManyRequests(fmt.Sprintf("the tenant has %d sessions open; the cap is %d: close one first", live, s.cfg.MaxSessions))
	}
	return nil
}
