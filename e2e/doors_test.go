package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/api"
)

// stdioReply is one line `enqueue mcp` writes.
type stdioReply struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestMCPStdioBadInput drives the real `enqueue mcp` over its stdin and
// stdout as a hostile client would: a line that is not JSON, JSON-RPC
// 1.0, binary garbage, a batch, a 20 MiB tools/call and 200 lines of
// random bytes each get a JSON-RPC error (-32700 or -32600, the id when
// known) and the server reads on: tools/list is answered and run_code
// runs code on a real worker. Closing stdin ends it with status 0.
func TestMCPStdioBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	cmd := exec.Command(bins.enqueue, append(e.apiArgs(), "mcp")...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &syncWriter{w: &stderr}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})

	// Writes go through a goroutine: a 20 MiB line must not block the
	// test while the server answers.
	lines := make(chan []byte, 16)
	go func() {
		for l := range lines {
			if _, err := stdin.Write(l); err != nil {
				return
			}
		}
		stdin.Close()
	}()
	send := func(s string) { lines <- []byte(s + "\n") }
	replies := make(chan stdioReply, 64)
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(replies)
				return
			}
			var rep stdioReply
			if json.Unmarshal(line, &rep) != nil {
				rep.ID = "unparsable: " + string(line)
			}
			replies <- rep
		}
	}()
	// reply waits for the answer with id.
	reply := func(id any, timeout time.Duration) stdioReply {
		t.Helper()
		deadline := time.After(timeout)
		for {
			select {
			case r, ok := <-replies:
				require.True(t, ok, "stdout closed: %s", stderr.String())
				if fmt.Sprint(r.ID) == fmt.Sprint(id) {
					return r
				}
			case <-deadline:
				t.Fatalf("no answer with id %v; stderr: %s", id, stderr.String())
			}
		}
	}
	requireError := func(id any, code int64, msg string) {
		t.Helper()
		r := reply(id, 20*time.Second)
		require.NotNil(t, r.Error, "an error answer to %v", id)
		require.Equal(t, code, r.Error.Code, r.Error.Message)
		require.Contains(t, r.Error.Message, msg)
	}

	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	require.Nil(t, reply(0, 20*time.Second).Error)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	send(`not json`)
	requireError(nil, -32700, "parse error")
	send(`{"jsonrpc":"1.0","id":1,"method":"tools/list"}`)
	requireError(1, -32600, `"1.0"`)
	send("\x00\x01\xff\xfe\x1b[31mgarbage")
	requireError(nil, -32700, "parse error")
	send(`[{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	requireError(nil, -32600, "batches")
	send(`{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`)
	requireError(3, -32601, "method not found")
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_code","arguments":{"lang":"python","code":"` + strings.Repeat("x", 20<<20) + `"}}}`)
	requireError(4, -32600, "the cap is 16777216 bytes")

	rng := rand.New(rand.NewPCG(33, 33))
	for i := range 200 {
		b := make([]byte, 1+rng.IntN(300))
		for j := range b {
			b[j] = byte(rng.IntN(256))
			if b[j] == '\n' {
				b[j] = ' '
			}
		}
		if i%2 == 0 { // half start as JSON would
			b[0] = '{'
		}
		send(string(b))
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"probe-%d","method":"ping"}`, i))
		r := reply(fmt.Sprintf("probe-%d", i), 20*time.Second)
		require.Nil(t, r.Error, "line %d: % x", i, b)
	}

	send(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	r := reply(5, 20*time.Second)
	require.Nil(t, r.Error)
	require.Contains(t, string(r.Result), `"run_code"`)

	send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"run_code","arguments":{"lang":"python","code":"print(6*7)"}}}`)
	r = reply(6, 3*time.Minute)
	require.Nil(t, r.Error)
	var res struct {
		IsError           bool `json:"isError"`
		StructuredContent struct {
			Status string `json:"status"`
			Stdout string `json:"stdout"`
		} `json:"structuredContent"`
	}
	require.NoError(t, json.Unmarshal(r.Result, &res), string(r.Result))
	require.False(t, res.IsError, string(r.Result))
	require.Equal(t, "succeeded", res.StructuredContent.Status)
	require.Equal(t, "42\n", res.StructuredContent.Stdout)

	close(lines) // the client closes stdin
	select {
	case err := <-done:
		require.NoError(t, err, "exit status 0 at the end of stdin: %s", stderr.String())
		done <- nil // for Cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("enqueue mcp runs on after its stdin closed")
	}
}

// TestAPIErrorsBlackBox: the api binary answers unknown paths, wrong
// methods and traversal with problems, and serves the docs' artifact
// curl (docs/api.md): a plot's name with its slash as it is, and
// escaped, for its owner only.
func TestAPIErrorsBlackBox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.startWorker("--artifact-dir", dir, "--artifact-prefix", e.prefix)
	a := e.startAPI("--artifact-dir", dir)
	key := e.apiKey("acme")
	other := e.apiKey("other")

	problem := func(method, path string, status int) *http.Response {
		t.Helper()
		var p map[string]any
		resp := call(t, method, a.url+path, key, nil, &p)
		require.Equal(t, status, resp.StatusCode, "%s %s: %v", method, path, p)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "%s %s", method, path)
		for _, k := range []string{"type", "title", "status", "detail"} {
			require.Contains(t, p, k, "%s %s", method, path)
		}
		return resp
	}
	problem("GET", "/v1/no-such-thing", 404)
	require.Equal(t, "GET, HEAD", problem("DELETE", "/v1/languages", 405).Header.Get("Allow"))
	require.Equal(t, "POST", problem("PUT", "/v1/jobs", 405).Header.Get("Allow"))

	var v api.JobView
	resp := call(t, "POST", a.url+"/v1/jobs?wait=60s", key, map[string]any{"lang": "python",
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"}, &v)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, v.Artifacts, 1)
	require.Equal(t, "plots/plot-001.png", v.Artifacts[0].Name)
	for _, name := range []string{"plots/plot-001.png", "plots%2Fplot-001.png"} {
		resp = call(t, "GET", a.url+"/v1/jobs/"+v.ID+"/artifacts/"+name, key, nil, nil)
		require.Equal(t, 200, resp.StatusCode, name)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(body), "\x89PNG"), name)
	}
	resp = call(t, "GET", a.url+"/v1/jobs/"+v.ID+"/artifacts/plots/plot-001.png", other, nil, nil)
	require.Equal(t, 404, resp.StatusCode, "another tenant's")
	problem("GET", "/v1/jobs/"+v.ID+"/artifacts/plots/../../../../etc/passwd", 400)
	problem("GET", "/v1/jobs/"+v.ID+"/artifacts/..%2F..%2Fetc%2Fpasswd", 422)
	problem("GET", "/v1/jobs/"+v.ID+"/artifacts/%2Fetc%2Fpasswd", 422)
}
