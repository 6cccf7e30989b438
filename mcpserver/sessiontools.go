package mcpserver

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
)

// SessionCreateInput is session_create's input.
type SessionCreateInput struct {
	Lang            string      `json:"lang" jsonschema:"the interpreter: python, javascript, r or bash"`
	Libraries       []string    `json:"libraries,omitempty" jsonschema:"packages installed before the interpreter starts, as run_code's"`
	Files           []FileInput `json:"files,omitempty" jsonschema:"files written into the work dir before the interpreter starts"`
	Limits          jobs.Limits `json:"limits,omitzero" jsonschema:"the container's limits; timeout_ms is each cell's default timeout"`
	IdleTTLSeconds  int         `json:"idle_ttl_seconds,omitempty" jsonschema:"close the session when no cell ran for this long (default 600)"`
	LifetimeSeconds int         `json:"lifetime_seconds,omitempty" jsonschema:"close the session this long after it was created (default 3600, at most 86400)"`
}

// SessionIDInput names a session.
type SessionIDInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's ID, as session_create returned it"`
}

// SessionExecInput is session_exec's input.
type SessionExecInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's ID, as session_create returned it"`
	Code      string `json:"code" jsonschema:"the cell's code; the interpreter keeps its state (variables, imports, files) from earlier cells"`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"interrupt the cell after this long (default: the session's limits.timeout_ms); the session lives on"`
}

// SessionUploadInput is session_upload's input.
type SessionUploadInput struct {
	SessionID  string `json:"session_id" jsonschema:"the session's ID"`
	Path       string `json:"path" jsonschema:"where to write, relative to the work dir (directories are made)"`
	Content    string `json:"content,omitempty" jsonschema:"the file's text"`
	ContentB64 string `json:"content_b64,omitempty" jsonschema:"the file's bytes in standard base64, instead of content"`
}

// SessionPathInput names a file of a session.
type SessionPathInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's ID"`
	Path      string `json:"path" jsonschema:"the file's path relative to the work dir"`
}

// SessionFilesInput is session_files' input.
type SessionFilesInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's ID"`
	Dir       string `json:"dir,omitempty" jsonschema:"a directory of the work dir (default: the work dir)"`
}

// SessionFilesOutput is session_files' output.
type SessionFilesOutput struct {
	Files []jobs.FileEntry `json:"files" jsonschema:"every file and directory under dir, recursively, sorted by path"`
}

// SessionFileOutput describes a file session_upload wrote or
// session_download read.
type SessionFileOutput struct {
	Path        string `json:"path"`
	Size        int    `json:"size"`
	ContentType string `json:"content_type,omitempty"`
}

// displaySchemas give a displayed value (jobs.Display) its JSON shape: one
// flat object of MIME types (and "artifact", "url") to strings.
var displaySchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[jobs.Display](): {Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"},
		Description: "a displayed value: MIME type to content (binary types in base64); artifact and url name a value moved to the artifact store"},
}

func (s *server) addSessionTools(srv *mcp.Server) error {
	in, err := jsonschema.For[SessionCreateInput](nil)
	if err != nil {
		return err
	}
	documentLimits(in.Properties["limits"])
	cellOut, err := jsonschema.For[jobs.CellResult](&jsonschema.ForOptions{TypeSchemas: displaySchemas})
	if err != nil {
		return err
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "session_create", Title: "Open a session",
		Description: "Opens a session: a live interpreter (python, javascript, r or bash) in its own sandbox (no network unless the session's policy allows, operator and key permitting), " +
			"whose state lasts from one session_exec to the next. Returns its record; session_id is its id. Close it with " +
			"session_close when done (it also closes after idle_ttl_seconds without a cell).",
		InputSchema: in, Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionCreateInput) (*mcp.CallToolResult, *jobs.SessionInfo, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		files, err := jobFiles(in.Files)
		if err != nil {
			return errorResult(err), nil, nil
		}
		info, err := b.OpenSession(ctx, jobs.SessionSpec{Lang: in.Lang, Libraries: in.Libraries, Files: files, Limits: in.Limits,
			IdleTTLSeconds: in.IdleTTLSeconds, LifetimeSeconds: in.LifetimeSeconds})
		if err != nil {
			return errorResult(err), nil, nil
		}
		return textResult(fmt.Sprintf("session %s (%s) is %s; run cells with session_exec, session_id %q", info.ID, info.Lang, info.State, info.ID)), &info, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "session_exec", Title: "Run a cell in a session",
		Description: "Runs code in the session's interpreter, its state kept from earlier cells, and returns stdout, stderr, " +
			"the displayed values (the last expression's value; images such as matplotlib figures as image content) and the " +
			"error it raised. Status ok, error, timeout, or session_ended when the interpreter died; any but ok is an error result.",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)}, OutputSchema: cellOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionExecInput) (*mcp.CallToolResult, *jobs.CellResult, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		r, err := b.Exec(ctx, in.SessionID, jobs.Cell{Code: in.Code, TimeoutMS: in.TimeoutMS})
		if err != nil {
			return errorResult(err), nil, nil
		}
		return s.cellResult(r), &r, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "session_upload", Title: "Upload a file into a session",
		Description: fmt.Sprintf("Writes a file into the session's work dir (an existing one is replaced), at most %d bytes.", jobs.MaxSessionFileBytes),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(true)},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionUploadInput) (*mcp.CallToolResult, *SessionFileOutput, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		files, err := jobFiles([]FileInput{{Path: in.Path, Content: in.Content, ContentB64: in.ContentB64}})
		if err != nil {
			return errorResult(err), nil, nil
		}
		if err := b.Upload(ctx, in.SessionID, in.Path, files[0].ContentB64); err != nil {
			return errorResult(err), nil, nil
		}
		return textResult(fmt.Sprintf("wrote %s (%d bytes)", in.Path, len(files[0].ContentB64))),
			&SessionFileOutput{Path: in.Path, Size: len(files[0].ContentB64)}, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "session_files", Title: "List a session's files",
		Description: "Lists the files and directories of the session's work dir (or of dir in it), recursively.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionFilesInput) (*mcp.CallToolResult, *SessionFilesOutput, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		files, err := b.Files(ctx, in.SessionID, in.Dir)
		if err != nil {
			return errorResult(err), nil, nil
		}
		if files == nil {
			files = []jobs.FileEntry{}
		}
		return nil, &SessionFilesOutput{Files: files}, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "session_download", Title: "Download a file from a session",
		Description: fmt.Sprintf("Reads a regular file of the session's work dir (at most %d bytes): an image as image content, "+
			"other files as an embedded resource (text, or base64 bytes).", min(jobs.MaxSessionFileBytes, s.cfg.MaxResourceBytes)),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionPathInput) (*mcp.CallToolResult, *SessionFileOutput, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		data, err := b.Download(ctx, in.SessionID, in.Path)
		if err != nil {
			return errorResult(err), nil, nil
		}
		if int64(len(data)) > s.cfg.MaxResourceBytes {
			return errorResult(fmt.Errorf("%s is %d bytes; session_download sends at most %d (the HTTP API's GET /v1/sessions/{id}/files/{path} sends up to %d)",
				in.Path, len(data), s.cfg.MaxResourceBytes, jobs.MaxSessionFileBytes)), nil, nil
		}
		ct := media.ContentType(in.Path)
		out := &SessionFileOutput{Path: in.Path, Size: len(data), ContentType: ct}
		res := &mcp.CallToolResult{}
		uri := "sandq://sessions/" + url.PathEscape(in.SessionID) + "/files/" + url.PathEscape(in.Path)
		switch {
		case inlineImage(ct) && int64(len(data)) <= s.cfg.MaxImageBytes:
			res.Content = []mcp.Content{&mcp.ImageContent{Data: data, MIMEType: ct}}
		case utf8.Valid(data) && !strings.Contains(string(data), "\x00"):
			res.Content = []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: uri, MIMEType: ct, Text: string(data)}}}
		default:
			res.Content = []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: uri, MIMEType: ct, Blob: data}}}
		}
		res.Content = append(res.Content, &mcp.TextContent{Text: fmt.Sprintf("%s: %d bytes, %s", path.Clean(in.Path), len(data), ct)})
		return res, out, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "session_close", Title: "Close a session",
		Description: "Ends the session and removes its sandbox; returns its final record. Closing an ended session returns its record.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionIDInput) (*mcp.CallToolResult, *jobs.SessionInfo, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		info, err := b.CloseSession(ctx, in.SessionID)
		if err != nil {
			return errorResult(err), nil, nil
		}
		return textResult(fmt.Sprintf("session %s is %s", info.ID, info.State)), &info, nil
	})
	return nil
}

// cellResult is a CellResult as a tool result: the output and error as
// text, each displayed value as text or an image (within the caps).
func (s *server) cellResult(r jobs.CellResult) *mcp.CallToolResult {
	var sb strings.Builder
	fmt.Fprintf(&sb, "cell %d: %s", r.ExecutionCount, r.Status)
	if r.Usage.WallMS > 0 {
		fmt.Fprintf(&sb, ", %d ms", r.Usage.WallMS)
	}
	if r.Session != "" && r.Session != jobs.SessionReady {
		fmt.Fprintf(&sb, "; the session is %s", r.Session)
	}
	sb.WriteString("\n")
	if r.Reason != "" {
		fmt.Fprintf(&sb, "reason: %s\n", r.Reason)
	}
	for _, st := range []struct {
		name, text string
		cut        bool
	}{{"stdout", r.Stdout, r.StdoutTruncated}, {"stderr", r.Stderr, r.StderrTruncated}} {
		if st.text == "" {
			continue
		}
		text, cut := elide(st.text, s.cfg.MaxTextBytes)
		fmt.Fprintf(&sb, "--- %s%s ---\n%s", st.name, map[bool]string{true: " (truncated)"}[cut || st.cut], text)
		if !strings.HasSuffix(text, "\n") {
			sb.WriteString("\n")
		}
	}
	if r.Error != nil {
		fmt.Fprintf(&sb, "--- error ---\n%s: %s\n", r.Error.Name, r.Error.Value)
		if len(r.Error.Traceback) > 0 {
			tb, _ := elide(strings.Join(r.Error.Traceback, "\n"), s.cfg.MaxTextBytes)
			sb.WriteString(tb + "\n")
		}
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: sb.String()}}, IsError: r.Status != jobs.CellOK}
	images, inline := 0, int64(0)
	for _, d := range r.Results {
		shown := false
		for _, img := range d.Images() {
			if shown || images >= s.cfg.MaxImages {
				break
			}
			if int64(len(img.Data)) > s.cfg.MaxImageBytes || inline+int64(len(img.Data)) > s.cfg.MaxInlineBytes {
				continue
			}
			images++
			inline += int64(len(img.Data))
			res.Content = append(res.Content, &mcp.ImageContent{Data: img.Data, MIMEType: img.Type})
			shown = true
		}
		if text, ok := d.Text(); ok {
			t, _ := elide(text, s.cfg.MaxTextBytes)
			res.Content = append(res.Content, &mcp.TextContent{Text: t})
		} else if d.Artifact != "" && !shown {
			res.Content = append(res.Content, &mcp.TextContent{Text: "a displayed value too large to send inline was stored as " + d.Artifact})
		}
	}
	return res
}

// textResult is a result with one text.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
