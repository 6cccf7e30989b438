package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// TestMCPHTTPBadInput: the API's MCP door answers a body that is not
// JSON, a message that is not JSON-RPC 2.0, a batch, an unknown method
// and a body past the cap with JSON-RPC errors, and serves on: a client
// then runs code through it.
func TestMCPHTTPBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1")
	a := e.startAPI("--max-job-bytes", "1000000")
	key := e.apiKey("mcp-http-bad")

	post := func(body []byte, session string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest("POST", a.url+"/mcp", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		s := string(b)
		if i := strings.Index(s, "data: "); i >= 0 { // an SSE answer
			s = strings.TrimSpace(s[i+len("data: "):])
		}
		if json.Unmarshal([]byte(s), &v) != nil {
			v = map[string]any{"raw": string(b), "content_type": resp.Header.Get("Content-Type")}
		}
		return resp.StatusCode, v
	}
	code := func(v map[string]any) float64 {
		t.Helper()
		errObj, ok := v["error"].(map[string]any)
		require.True(t, ok, "a JSON-RPC error: %v", v)
		return errObj["code"].(float64)
	}
	for name, tc := range map[string]struct {
		body   []byte
		status int
		code   float64
	}{
		"not JSON":     {[]byte(`{"jsonrpc": "2.0", "method": `), 400, -32700},
		"binary":       {[]byte{0xff, 0xfe, 0x00, 0x01, '{'}, 400, -32700},
		"JSON-RPC 1.0": {[]byte(`{"jsonrpc":"1.0","id":7,"method":"tools/list"}`), 400, -32600},
		"batch":        {[]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`), 400, -32600},
		"scalar":       {[]byte(`42`), 400, -32600},
		"past the cap": {[]byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_code","arguments":{"lang":"python","code":"` + strings.Repeat("#", 2_000_000) + `"}}}`), 413, -32600},
	} {
		status, v := post(tc.body, "")
		require.Equal(t, tc.status, status, "%s: %v", name, v)
		require.Equal(t, tc.code, code(v), name)
		if name == "past the cap" {
			require.Contains(t, v["error"].(map[string]any)["message"], "the cap is 1000000 bytes", name)
			require.Equal(t, float64(9), v["id"], "the id, read from the message's start")
		}
	}

	// A session, an unknown method in it, then code.
	c := mcp.NewClient(&mcp.Implementation{Name: "sandq-e2e", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}}, nil)
	require.NoError(t, err)
	defer cs.Close()
	status, v := post([]byte(`{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`), cs.ID())
	require.Equal(t, 200, status, "%v", v)
	require.Equal(t, float64(-32601), code(v), "method not found")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"lang": "python", "code": "print(6*7)"}})
	require.NoError(t, err)
	j := structured[mcpJob](t, res)
	require.Equal(t, jobs.StatusSucceeded, j.Status)
	require.Equal(t, "42\n", j.Stdout)
}
