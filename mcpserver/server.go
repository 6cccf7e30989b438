// Package mcpserver is sandq's Model Context Protocol server: tools that
// run code, follow and cancel jobs, drive sessions and read artifacts, for
// LLM agents. It is a door of package service, like the HTTP API: it links
// no container engine and no storage SDK, and every rule is the
// service's. One server serves both transports: stdio (`enqueue mcp`, for
// clients that launch a command, as the operator) and Streamable HTTP
// (/mcp on the API server, behind its keys, as the key's caller). A
// Backend (ServiceBackend) does the work for one caller.
//
// A job that fails, an invalid request and an unknown session are tool
// results with isError and readable text, never protocol errors: an agent
// reads them and tries again.
package mcpserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// Config configures a server.
type Config struct {
	// Backend returns the backend of a request's caller: the one backend
	// over stdio; over HTTP, the one of the request's key (extra holds its
	// token). An error refuses the call with its text. Required.
	Backend func(ctx context.Context, extra *mcp.RequestExtra) (Backend, error)
	// Service lists the languages, with the toolchain versions the workers
	// publish. Required.
	Service *service.Service
	// Version is the server's version in its implementation info.
	Version string
	// MaxWait caps how long a tool waits for a job (a call's wait_seconds).
	// Default 10 minutes.
	MaxWait time.Duration
	// ProgressEvery is the interval of progress notifications while a job
	// is queued or running, to callers that asked for them. Default 1 s.
	ProgressEvery time.Duration
	// MaxImages caps the images of one tool result (more are resource
	// links). Default 8.
	MaxImages int
	// MaxImageBytes caps one image inline (a larger one is a resource
	// link). Default 2 MiB.
	MaxImageBytes int64
	// MaxInlineBytes caps the images of one result together. Default 6 MiB.
	MaxInlineBytes int64
	// MaxTextBytes caps each output stream (stdout, stderr) in a result;
	// the rest is elided from the middle, and get_job's structured
	// content, or the job's output artifact, has the whole. Default 256 KiB.
	MaxTextBytes int
	// MaxResourceBytes caps an artifact read as a resource, or a file
	// downloaded from a session: a message of a client on stdio is one
	// line, and the Go SDK's client reads lines of up to 16 MiB (base64
	// makes 8 MiB 10.7). Default 8 MiB.
	MaxResourceBytes int64
	// Logger logs the SDK's events. Default: none.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.MaxWait = cmp.Or(c.MaxWait, 10*time.Minute)
	c.ProgressEvery = cmp.Or(c.ProgressEvery, time.Second)
	c.MaxImages = cmp.Or(c.MaxImages, 8)
	c.MaxImageBytes = cmp.Or(c.MaxImageBytes, 2<<20)
	c.MaxInlineBytes = cmp.Or(c.MaxInlineBytes, 6<<20)
	c.MaxTextBytes = cmp.Or(c.MaxTextBytes, 256<<10)
	c.MaxResourceBytes = cmp.Or(c.MaxResourceBytes, 8<<20)
	c.Version = cmp.Or(c.Version, "dev")
	return c
}

// server holds the tools' configuration.
type server struct{ cfg Config }

const instructions = `sandq runs code in hardened sandboxes, with no network unless the job's policy allows it (operator and key permitting). run_code runs a program once ` +
	`(any language of list_languages; libraries installed on demand; plots come back as images, other files ` +
	`named in output_files as resource links). For state kept between runs (variables, files), open a session ` +
	`(session_create), run cells in it (session_exec), and close it (session_close) when done. A result whose ` +
	`status is not "succeeded" is an error result: read its stderr and reason. An environment (env_create: a ` +
	`language image plus Debian packages, libraries and files, built once) is named with environment.`

// New returns the MCP server: its tools, the languages resource and the
// artifact template.
func New(cfg Config) (*mcp.Server, error) {
	if cfg.Backend == nil || cfg.Service == nil {
		return nil, errors.New("mcpserver: Config needs Backend and Service")
	}
	s := &server{cfg: cfg.withDefaults()}
	srv := mcp.NewServer(&mcp.Implementation{Name: "sandq", Title: "sandq code sandbox", Version: s.cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: s.cfg.Logger})
	if err := s.addJobTools(srv); err != nil {
		return nil, err
	}
	if err := s.addEnvTools(srv); err != nil {
		return nil, err
	}
	if err := s.addSessionTools(srv); err != nil {
		return nil, err
	}
	if err := s.addCompatTools(srv); err != nil {
		return nil, err
	}
	s.addResources(srv)
	return srv, nil
}

// backend resolves the caller's backend.
func (s *server) backend(ctx context.Context, extra *mcp.RequestExtra) (Backend, error) {
	return s.cfg.Backend(ctx, extra)
}

// errorResult is a tool result with isError and err's text.
func errorResult(err error) *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	r.SetError(errors.New(errorText(err)))
	return r
}

// errorText is err as an agent should read it: an invalid request names
// its field.
func errorText(err error) string {
	if e, ok := errors.AsType[*service.Error](err); ok {
		if e.Kind != service.Invalid {
			return e.Error()
		}
		msg := "invalid request: " + e.Msg
		switch {
		case e.Field != "":
			msg += "; " + e.Field + ": " + e.Detail
		case e.Detail != "":
			msg += ": " + e.Detail
		}
		return msg
	}
	if ve, ok := errors.AsType[*jobs.ValidationError](err); ok {
		if ve.Field != "" {
			return "invalid request: " + ve.Field + ": " + ve.Msg
		}
		return "invalid request: " + ve.Msg
	}
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "jobs: ")
	return msg
}

// waitFor is a call's wait_seconds, capped: the server's cap when 0.
func (s *server) waitFor(seconds int) time.Duration {
	if seconds <= 0 {
		return s.cfg.MaxWait
	}
	return min(time.Duration(seconds)*time.Second, s.cfg.MaxWait)
}

// await waits up to limit for job id to end and returns its last Result.
// While it waits, a caller that sent a progress token gets a notification
// every ProgressEvery (queued, running, for how long). When the call is
// canceled (the client's notifications/cancelled, or it went away) the job
// is canceled too if cancel is set: nobody is left to read it.
func (s *server) await(ctx context.Context, req *mcp.CallToolRequest, b Backend, id string, limit time.Duration, cancel bool) (jobs.Result, error) {
	token := req.Params.GetProgressToken()
	step := 10 * time.Second
	if token != nil {
		step = s.cfg.ProgressEvery
	}
	deadline := time.Now().Add(limit)
	start := time.Now()
	n := 0
	for {
		r, err := b.Job(ctx, id, min(step, max(time.Until(deadline), 0)))
		if ctx.Err() != nil {
			if cancel {
				cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if cerr := b.Cancel(cctx, id); cerr != nil && s.cfg.Logger != nil {
					s.cfg.Logger.Warn("cancel the job of a canceled call", "job", id, "err", cerr)
				}
				stop()
			}
			return r, context.Cause(ctx)
		}
		if err != nil || r.Status.Final() || !time.Now().Before(deadline) {
			return r, err
		}
		if token != nil && req.Session != nil {
			n++
			msg := fmt.Sprintf("job %s %s", id, r.Status)
			if r.Status == jobs.StatusRunning && !r.StartedAt.IsZero() {
				msg += fmt.Sprintf(" for %.1f s", time.Since(r.StartedAt).Seconds())
			} else {
				msg += fmt.Sprintf(" (%.1f s since the call)", time.Since(start).Seconds())
			}
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: msg})
		}
	}
}
