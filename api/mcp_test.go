package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandq/sandq/service"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// bearer adds a key to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpClient connects the SDK's client to the API's /mcp with key.
func (b *apiBundle) mcpClient(key string, opts *mcp.ClientOptions) *mcp.ClientSession {
	b.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: b.http.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}}, nil)
	require.NoError(b.t, err)
	b.t.Cleanup(func() { cs.Close() })
	return cs
}

// text is a tool result's text contents, joined.
func text(r *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(t.Text)
		}
	}
	return sb.String()
}

// TestMCP drives /mcp with the SDK's own client: keys (none: 401; another
// key's MCP session: 403), tools/list, run_code through the queue to a
// worker's result, isError for invalid input and for failed jobs, tenant
// isolation, progress notifications while queued, and a cancelled call
// cancelling its job.
func TestMCP(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	keyA, keyB := b.key("tenant-a", service.KeyOptions{}), b.key("tenant-b", service.KeyOptions{})
	readOnly := b.key("tenant-a", service.KeyOptions{Scopes: []string{ScopeRead}})

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	post := func(key, session, body string) *http.Response {
		req, err := http.NewRequest("POST", b.http.URL+"/mcp", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, 401, post("", "", initialize).StatusCode, "no key")
	require.Equal(t, 401, post("sqk_nope_nope", "", initialize).StatusCode, "unknown key")
	resp := post(keyA, "", initialize)
	require.Equal(t, 200, resp.StatusCode)
	sid := resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, sid)
	require.Equal(t, 403, post(keyB, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`).StatusCode, "B may not use A's MCP session")

	ctx := context.Background()
	var progress atomic.Int32
	a := b.mcpClient(keyA, &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) }})
	tools, err := a.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		require.NotEmpty(t, tool.Description, tool.Name)
	}
	for _, want := range []string{"run_code", "get_job", "cancel_job", "list_languages", "session_create", "session_exec", "session_upload",
		"session_files", "session_download", "session_close", "execute_code", "get_supported_languages", "get_language_details"} {
		require.Contains(t, names, want)
	}

	res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"lang": "cobol", "code": "x"}})
	require.NoError(t, err, "an invalid request is a tool result, not a protocol error")
	require.True(t, res.IsError)
	require.Contains(t, text(res), "lang")
	res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "x"}})
	require.NoError(t, err)
	require.True(t, res.IsError, "a missing lang")

	// Queued, with a progress token: notifications while it waits; then
	// the client cancels the call, and the job is canceled.
	callCtx, cancelCall := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := a.CallTool(callCtx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"lang": "python", "code": "print(1)"},
			Meta: mcp.Meta{"progressToken": "p1"}})
		done <- err
	}()
	var queuedID string
	require.Eventually(t, func() bool {
		ids, _ := b.ns.Store.PendingJobIDs(ctx, "tenant-a")
		if len(ids) == 1 {
			queuedID = ids[0]
		}
		return queuedID != "" && progress.Load() >= 2
	}, 20*time.Second, 50*time.Millisecond, "the job is enqueued for tenant-a and progress is notified")
	cancelCall()
	require.Error(t, <-done)
	require.Eventually(t, func() bool {
		r, err := b.client.Get(ctx, queuedID)
		return err == nil && r.Status == jobs.StatusCanceled
	}, 10*time.Second, 50*time.Millisecond, "cancelling the call cancels the job")

	// A worker runs what follows.
	b.ns.StartFakeWorker(t)
	res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"lang": "py", "code": "print('hi')"}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))
	var out struct {
		ID     string      `json:"id"`
		Status jobs.Status `json:"status"`
		Stdout string      `json:"stdout"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Equal(t, jobs.StatusSucceeded, out.Status)
	require.Equal(t, "print('hi')", out.Stdout, "the fake worker echoes the code")
	require.NotContains(t, out.ID, ".", "the tenant's own ID, without the namespace")
	require.Contains(t, text(res), "succeeded")

	res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"lang": "python", "code": "# FAIL"}})
	require.NoError(t, err)
	require.True(t, res.IsError, "a failed job is an error result")
	require.Contains(t, text(res), "AssertionError")

	// Tenant B cannot read A's job; A can, by its own ID.
	bc := b.mcpClient(keyB, nil)
	res, err = bc.CallTool(ctx, &mcp.CallToolParams{Name: "get_job", Arguments: map[string]any{"id": out.ID}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, text(res), "no job")
	res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "get_job", Arguments: map[string]any{"id": out.ID}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))

	// A read-only key reads but does not run.
	ro := b.mcpClient(readOnly, nil)
	res, err = ro.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"lang": "python", "code": "1"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, text(res), "scope")

	res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "get_language_details", Arguments: map[string]any{"language": "JS"}})
	require.NoError(t, err)
	require.False(t, res.IsError, text(res))
	require.Contains(t, text(res), `"language": "javascript"`)
	langs, err := a.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandq://languages"})
	require.NoError(t, err)
	require.Contains(t, langs.Contents[0].Text, `"name": "rust"`)
	// A job or artifact the caller has none of is MCP's "resource not
	// found" (invalid params, the URI in data), not a JSON-RPC error of
	// code 0.
	_, err = a.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandq://jobs/nope/artifacts/out.txt"})
	var werr *jsonrpc.Error
	require.ErrorAs(t, err, &werr)
	require.EqualValues(t, jsonrpc.CodeInvalidParams, werr.Code, werr.Message)
	require.Contains(t, string(werr.Data), "sandq://jobs/nope/artifacts/out.txt")
}

// TestMCPSessions runs the session tools over /mcp against a session
// worker: state kept across two session_exec calls, an image result as
// image content, files up and down, close, and another tenant's 'no
// session'.
func TestMCPSessions(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	b.ns.StartFakeSessionWorker(t, 2)
	a := b.mcpClient(b.key("tenant-a", service.KeyOptions{}), nil)
	other := b.mcpClient(b.key("tenant-b", service.KeyOptions{}), nil)
	ctx := context.Background()
	call := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return res
	}
	res := call(a, "session_create", map[string]any{"lang": "python"})
	require.False(t, res.IsError, text(res))
	var info jobs.SessionInfo
	raw, _ := json.Marshal(res.StructuredContent)
	require.NoError(t, json.Unmarshal(raw, &info))
	require.Equal(t, jobs.SessionReady, info.State)
	require.NotContains(t, info.ID, ".")

	res = call(a, "session_exec", map[string]any{"session_id": info.ID, "code": "# DISPLAY"})
	require.False(t, res.IsError, text(res))
	require.True(t, slices.ContainsFunc(res.Content, func(c mcp.Content) bool { _, ok := c.(*mcp.ImageContent); return ok }), "an image result is image content")
	res = call(a, "session_exec", map[string]any{"session_id": info.ID, "code": "# ERROR"})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "ValueError")

	res = call(a, "session_upload", map[string]any{"session_id": info.ID, "path": "d/x.txt", "content": "hello"})
	require.False(t, res.IsError, text(res))
	res = call(a, "session_upload", map[string]any{"session_id": info.ID, "path": "../x", "content": "no"})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "path")
	res = call(a, "session_files", map[string]any{"session_id": info.ID})
	require.False(t, res.IsError, text(res))
	require.Contains(t, text(res), "d/x.txt")
	res = call(a, "session_download", map[string]any{"session_id": info.ID, "path": "d/x.txt"})
	require.False(t, res.IsError, text(res))
	er, ok := res.Content[0].(*mcp.EmbeddedResource)
	require.True(t, ok)
	require.Equal(t, "hello", er.Resource.Text)

	res = call(other, "session_exec", map[string]any{"session_id": info.ID, "code": "1"})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "no session")

	res = call(a, "session_close", map[string]any{"session_id": info.ID})
	require.False(t, res.IsError, text(res))
	res = call(a, "session_exec", map[string]any{"session_id": info.ID, "code": "1"})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "ended")
}

// TestMCPSessionCap: MCP sessions past --max-mcp-sessions are refused
// (503) until one closes.
func TestMCPSessionCap(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.MaxMCPSessions, c.MaxMCPSessionsPerTenant = 2, 2 })
	key := b.key("t", service.KeyOptions{})
	first := b.mcpClient(key, nil)
	b.mcpClient(key, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "third", Version: "1"}, nil)
	_, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: b.http.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}}, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "Service Unavailable")
	require.NoError(t, first.Close())
	require.Eventually(t, func() bool {
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: b.http.URL + "/mcp",
			HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}}, nil)
		if err == nil {
			cs.Close()
		}
		return err == nil
	}, 15*time.Second, 50*time.Millisecond, "a closed session frees its place")
}

// TestMCPSessionCapCountsEachSessionOnce: a session opened right after
// another, up to the cap, is let in, round after round. The client's
// server/discover probe (answered without a session ID) and its initialize
// are each served in a session the SDK lists until their handler returns,
// and the client sends its next request as soon as it reads the answer:
// counted until then, a probe or a session took a second place and the
// cap refused a session under it (TestMCPSessionCap failed 4 runs in 100).
func TestMCPSessionCapCountsEachSessionOnce(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.MaxMCPSessions, c.MaxMCPSessionsPerTenant = 2, 2 })
	key := b.key("t", service.KeyOptions{RatePerSecond: 10000}) // 4 requests a session
	open := func() int {
		b.srv.mcpMu.Lock()
		defer b.srv.mcpMu.Unlock()
		total, _ := b.srv.mcpSessions("t")
		return total
	}
	for round := range 25 {
		first, second := b.mcpClient(key, nil), b.mcpClient(key, nil)
		require.Equal(t, 2, open(), "round %d", round)
		require.NoError(t, first.Close())
		require.NoError(t, second.Close())
		require.Eventually(t, func() bool { return open() == 0 }, 5*time.Second, 5*time.Millisecond, "round %d", round)
	}
}

// TestMCPSessionsPerTenant: one tenant cannot take the process's MCP
// sessions: past its share it is refused (429) while another tenant opens
// one.
func TestMCPSessionsPerTenant(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.MaxMCPSessions, c.MaxMCPSessionsPerTenant = 10, 1 })
	a, other := b.key("noisy", service.KeyOptions{}), b.key("quiet", service.KeyOptions{})
	b.mcpClient(a, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "second", Version: "1"}, nil)
	_, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: b.http.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{a, http.DefaultTransport}}}, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "Too Many Requests")
	b.mcpClient(other, nil)
	refusals := b.srv.svc.Refusals()
	require.Len(t, refusals, 1)
	require.Equal(t, "noisy/mcp_sessions", refusals[0].Tenant+"/"+refusals[0].Quota)
	require.Positive(t, refusals[0].N, "the client's attempts, each counted")
}
