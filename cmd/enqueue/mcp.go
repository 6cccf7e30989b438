package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/mcpserver"
	"github.com/sandq/sandq/service"
)

func (a *app) newMCPCmd() *cobra.Command {
	var (
		tenant, artifactDir string
		maxWait             time.Duration
		maxMessage          int
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandq's MCP tools on stdin and stdout, for MCP clients that launch a command",
		Long: `mcp is a Model Context Protocol server on stdio: an MCP client (a desktop
assistant, an agent framework, the MCP Inspector) launches it as a command and
calls its tools: run_code, get_job, cancel_job, list_languages; the session
tools (session_create, session_exec, session_upload, session_files,
session_download, session_close); llm-sandbox's execute_code,
get_supported_languages and get_language_details. Resources: sandq://languages
and sandq://jobs/{id}/artifacts/{name}.

It talks to Redis as every enqueue command does (the global flags and their
SANDQ_* variables); workers on that Redis run the jobs. Jobs and sessions
belong to --tenant. Logs go to stderr; stdout carries only the protocol.
A line that is not a JSON-RPC 2.0 message, or is longer than
--max-message-bytes, gets a JSON-RPC error answer (-32700 parse error,
-32600 invalid request) and the server reads on. It ends when the client
closes stdin, with status 0; when stdin or stdout fails, non-zero with the
error on stderr.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			svc, err := service.New(cmd.Context(), service.Config{Client: c, ArtifactDir: artifactDir})
			if err != nil {
				return a.failure(cmd, err)
			}
			defer svc.Close()
			backend := mcpserver.ServiceBackend{Service: svc, Caller: service.Operator(tenant)}
			srv, err := mcpserver.New(mcpserver.Config{
				Backend: func(context.Context, *mcp.RequestExtra) (mcpserver.Backend, error) { return backend, nil },
				Service: svc, MaxWait: maxWait,
				Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				return &exitError{code: exitCLI, err: err}
			}
			err = srv.Run(cmd.Context(), &mcpserver.LineTransport{Reader: a.stdin, Writer: a.stdout, MaxMessageBytes: maxMessage})
			if err == nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
				return nil
			}
			return a.failure(cmd, err)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", "", "tenant owning the jobs and sessions; tenants never share a container (env SANDQ_TENANT)")
	fl.StringVar(&artifactDir, "artifact-dir", config.DefaultArtifactDir(), "the local artifact store the workers write (artifacts with a path, not a URL) (env SANDQ_ARTIFACT_DIR)")
	fl.DurationVar(&maxWait, "max-wait", 10*time.Minute, "longest a tool waits for a job (wait_seconds' cap)")
	fl.IntVar(&maxMessage, "max-message-bytes", mcpserver.DefaultMaxMessageBytes, "longest message (one line) read from the client; a longer one gets a JSON-RPC error")
	config.Env(fl, "tenant", "SANDQ_TENANT")
	config.Env(fl, "artifact-dir", "SANDQ_ARTIFACT_DIR")
	return cmd
}
