package api

import (
	"context"
	"fmt"
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
	ID string `path:"id" minLength:"1" maxLength:"94" pattern:"^[A-Za-z0-9_.:-]+$" doc:"the session's ID"`
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
		info, err := s.svc.OpenSession(ctx, callerOf(ctx), in.Body)
		if err != nil {
			return nil, at(err, "body")
		}
		return &sessionOutput{Location: "/v1/sessions/" + url.PathEscape(info.ID), Body: info}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "list-sessions", Method: http.MethodGet, Path: "/v1/sessions", Tags: []string{"sessions"},
		Summary:  "List the tenant's sessions",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 429, 503},
	}, func(ctx context.Context, _ *struct{}) (*struct{ Body SessionList }, error) {
		list, err := s.svc.Sessions(ctx, callerOf(ctx))
		if err != nil {
			return nil, problem(err)
		}
		return &struct{ Body SessionList }{SessionList{Sessions: list}}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-session", Method: http.MethodGet, Path: "/v1/sessions/{id}", Tags: []string{"sessions"},
		Summary:     "Read a session",
		Description: "The session's record: its state (starting, ready; or closed, expired, lost, oom once it has ended, with the reason), cells run, times. An ended session's record is kept an hour.",
		Metadata:    map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429, 503},
	}, func(ctx context.Context, in *struct{ SessionIDParam }) (*sessionInfoOutput, error) {
		info, err := s.svc.SessionInfo(ctx, callerOf(ctx), in.ID)
		if err != nil {
			return nil, problem(err)
		}
		return &sessionInfoOutput{Body: info}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "close-session", Method: http.MethodDelete, Path: "/v1/sessions/{id}", Tags: []string{"sessions"},
		Summary:     "Close a session",
		Description: "Ends the session and removes its container; answers with its final record. Closing a session that has already ended answers its record as it is.",
		Metadata:    map[string]any{scope: ScopeWrite}, Errors: []int{401, 403, 404, 429, 503, 504},
	}, func(ctx context.Context, in *struct{ SessionIDParam }) (*sessionInfoOutput, error) {
		info, err := s.svc.CloseSession(ctx, callerOf(ctx), in.ID)
		if err != nil {
			return nil, problem(err)
		}
		return &sessionInfoOutput{Body: info}, nil
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
		r, err := s.svc.Exec(ctx, callerOf(ctx), in.ID, in.Body)
		if err != nil {
			return nil, at(err, "body")
		}
		return &struct{ Body jobs.CellResult }{r}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "interrupt-session", Method: http.MethodPost, Path: "/v1/sessions/{id}/interrupt", Tags: []string{"sessions"},
		Summary:     "Interrupt the running cell",
		Description: "Interrupts the cell that runs, if any (KeyboardInterrupt in Python): it ends with status error and the session lives on. Answers 202 with the session's record.",
		Metadata:    map[string]any{scope: ScopeWrite}, Errors: []int{401, 403, 404, 410, 429, 503, 504}, DefaultStatus: http.StatusAccepted,
	}, func(ctx context.Context, in *struct{ SessionIDParam }) (*sessionInfoOutput, error) {
		info, err := s.svc.Interrupt(ctx, callerOf(ctx), in.ID)
		if err != nil {
			return nil, problem(err)
		}
		return &sessionInfoOutput{Body: info}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "list-session-files", Method: http.MethodGet, Path: "/v1/sessions/{id}/files", Tags: []string{"sessions"},
		Summary:  "List a session's files",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 409, 410, 422, 429, 503, 504},
	}, func(ctx context.Context, in *struct {
		SessionIDParam
		Dir string `query:"dir" maxLength:"1024" doc:"a directory of the work dir (default: the work dir itself)"`
	}) (*struct{ Body SessionFiles }, error) {
		files, err := s.svc.SessionFiles(ctx, callerOf(ctx), in.ID, in.Dir)
		if err != nil {
			return nil, at(err, "query.dir")
		}
		return &struct{ Body SessionFiles }{SessionFiles{Files: files}}, nil
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
		if err := s.svc.Upload(ctx, callerOf(ctx), in.ID, in.Path, in.RawBody); err != nil {
			return nil, at(err, "path.path")
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
		f, release, err := s.svc.Download(ctx, callerOf(ctx), in.ID, in.Path)
		if err != nil {
			return nil, at(err, "path.path")
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			defer release()
			hctx.SetHeader("Content-Type", "application/octet-stream")
			hctx.SetHeader("X-Content-Type-Options", "nosniff")
			hctx.SetHeader("Content-Disposition", `attachment; filename="`+strings.NewReplacer(`"`, "", `\`, "").Replace(path.Base(in.Path))+`"`)
			hctx.SetHeader("Content-Length", strconv.FormatInt(f.Size(), 10))
			hctx.SetStatus(http.StatusOK)
			_ = s.writeBody(hctx, f)
		}}, nil
	})
}
