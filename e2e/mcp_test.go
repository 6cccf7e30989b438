package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// bearer adds an API key to every request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpText joins a tool result's text contents.
func mcpText(r *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(t.Text + "\n")
		}
	}
	return sb.String()
}

// mcpJob is the part of run_code's structured content the tests read.
type mcpJob struct {
	ID       string      `json:"id"`
	Status   jobs.Status `json:"status"`
	ExitCode *int        `json:"exit_code"`
	Stdout   string      `json:"stdout"`
	Stderr   string      `json:"stderr"`
}

func structured[T any](t *testing.T, r *mcp.CallToolResult) T {
	t.Helper()
	var v T
	raw, err := json.Marshal(r.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &v), string(raw))
	return v
}

// TestMCP drives sandq's MCP server end to end with the official Go SDK's
// client, over stdio (`enqueue mcp` launched as a command) and over
// Streamable HTTP (/mcp on the API, with a key), against a real worker:
// tools/list, run_code in three languages, a matplotlib plot as image
// content, an output file as a resource link read back through the
// artifact template, llm-sandbox's execute_code, a session keeping state across two
// session_exec calls, cancel_job, a cancelled call cancelling its job, an
// invalid language as an isError result; HTTP without a key is refused.
func TestMCP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.startWorker("--concurrency", "2", "--max-sessions", "2", "--artifact-dir", dir, "--artifact-prefix", e.prefix)
	a := e.startAPI("--artifact-dir", dir)
	key := e.apiKey("mcp-tenant")

	connect := func(t *testing.T, transport string, progress chan<- string) *mcp.ClientSession {
		opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- req.Params.Message:
			default:
			}
		}}
		c := mcp.NewClient(&mcp.Implementation{Name: "sandq-e2e", Version: "1"}, opts)
		var tr mcp.Transport
		switch transport {
		case "stdio":
			cmd := exec.Command(bins.enqueue, append(e.apiArgs(), "mcp", "--artifact-dir", dir)...)
			cmd.Stderr = os.Stderr
			tr = &mcp.CommandTransport{Command: cmd}
		case "http":
			tr = &mcp.StreamableClientTransport{Endpoint: a.url + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, tr, nil)
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}

	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			progress := make(chan string, 64)
			cs := connect(t, transport, progress)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			call := func(name string, args map[string]any) *mcp.CallToolResult {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
				require.NoError(t, err, "%s: a tool's failure is a result, not a protocol error", name)
				return res
			}

			tools, err := cs.ListTools(ctx, nil)
			require.NoError(t, err)
			var names []string
			for _, tool := range tools.Tools {
				names = append(names, tool.Name)
			}
			require.Subset(t, names, []string{"run_code", "get_job", "cancel_job", "list_languages", "session_create", "session_exec",
				"session_upload", "session_files", "session_download", "session_close", "execute_code", "get_supported_languages", "get_language_details",
				"env_create", "env_list", "env_show", "env_delete"})

			for lang, code := range map[string]string{"python": "print(6*7)", "javascript": "console.log(6*7)", "bash": "echo $((6*7))"} {
				res := call("run_code", map[string]any{"lang": lang, "code": code})
				require.False(t, res.IsError, "%s: %s", lang, mcpText(res))
				j := structured[mcpJob](t, res)
				require.Equal(t, jobs.StatusSucceeded, j.Status, lang)
				require.Equal(t, "42\n", j.Stdout, lang)
				require.Contains(t, mcpText(res), "42", lang)
			}

			res := call("run_code", map[string]any{"lang": "python", "code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('mcp')\nplt.show()"})
			require.False(t, res.IsError, mcpText(res))
			var img *mcp.ImageContent
			for _, c := range res.Content {
				if ic, ok := c.(*mcp.ImageContent); ok {
					img = ic
				}
			}
			require.NotNil(t, img, "the plot arrives as image content: %s", mcpText(res))
			require.Equal(t, "image/png", img.MIMEType)
			require.True(t, bytes.HasPrefix(img.Data, []byte("\x89PNG\r\n\x1a\n")), "a PNG")

			// Other files come as resource links, read through the artifact template.
			res = call("run_code", map[string]any{"lang": "python", "code": "import os\nos.makedirs('out')\nopen('out/r.csv','w').write('a,b\\n1,2\\n')",
				"output_files": []string{"out/*.csv"}})
			require.False(t, res.IsError, mcpText(res))
			var link *mcp.ResourceLink
			for _, c := range res.Content {
				if l, ok := c.(*mcp.ResourceLink); ok {
					link = l
				}
			}
			require.NotNil(t, link, mcpText(res))
			require.Equal(t, "out/r.csv", link.Name)
			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
			require.NoError(t, err)
			require.Equal(t, "a,b\n1,2\n", rr.Contents[0].Text)

			res = call("execute_code", map[string]any{"code": "print('compat')"})
			require.False(t, res.IsError, mcpText(res))
			require.Contains(t, mcpText(res), `"success":true`)
			require.Contains(t, mcpText(res), `"language":"python"`, "llm-sandbox's default language")

			res = call("run_code", map[string]any{"lang": "cobol", "code": "DISPLAY 'X'."})
			require.True(t, res.IsError)
			require.Contains(t, mcpText(res), "lang")
			require.Contains(t, mcpText(res), "cobol")

			res = call("session_create", map[string]any{"lang": "python"})
			require.False(t, res.IsError, mcpText(res))
			sess := structured[jobs.SessionInfo](t, res)
			res = call("session_exec", map[string]any{"session_id": sess.ID, "code": "x = 41"})
			require.False(t, res.IsError, mcpText(res))
			res = call("session_exec", map[string]any{"session_id": sess.ID, "code": "x + 1"})
			require.False(t, res.IsError, mcpText(res))
			require.Contains(t, mcpText(res), "42", "the session kept x")
			res = call("session_close", map[string]any{"session_id": sess.ID})
			require.False(t, res.IsError, mcpText(res))

			// cancel_job on a job still running when the call's wait ran out.
			res = call("run_code", map[string]any{"lang": "python", "code": "import time\ntime.sleep(60)", "wait_seconds": 2})
			require.False(t, res.IsError, mcpText(res))
			j := structured[mcpJob](t, res)
			require.False(t, j.Status.Final(), "still going after 2 s: %s", j.Status)
			res = call("cancel_job", map[string]any{"id": j.ID})
			require.False(t, res.IsError, mcpText(res))
			require.Equal(t, jobs.StatusCanceled, structured[mcpJob](t, res).Status)

			// A call the client cancels cancels its job: its ID comes in the
			// progress notifications.
			for len(progress) > 0 {
				<-progress
			}
			callCtx, cancelCall := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "run_code", Meta: mcp.Meta{"progressToken": "t1"},
					Arguments: map[string]any{"lang": "python", "code": "import time\ntime.sleep(60)"}})
				done <- err
			}()
			idRE := regexp.MustCompile(`^job (\S+) running`)
			var id string
			for id == "" {
				select {
				case msg := <-progress:
					if m := idRE.FindStringSubmatch(msg); m != nil {
						id = m[1]
					}
				case <-time.After(60 * time.Second):
					t.Fatal("no progress notification says the job runs")
				}
			}
			cancelCall()
			require.Error(t, <-done)
			res = call("get_job", map[string]any{"id": id, "wait_seconds": 30})
			require.False(t, res.IsError && structured[mcpJob](t, res).Status != jobs.StatusCanceled, mcpText(res))
			require.Equal(t, jobs.StatusCanceled, structured[mcpJob](t, res).Status, "the cancelled call's job")
		})
	}

	t.Run("HTTPWithoutKey", func(t *testing.T) {
		resp, err := http.Post(a.url+"/mcp", "application/json", strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		c := mcp.NewClient(&mcp.Implementation{Name: "nokey", Version: "1"}, nil)
		_, err = c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: a.url + "/mcp"}, nil)
		require.Error(t, err, "the SDK's client is refused too")
	})

	// An independent client: the MCP Inspector's CLI (Node.js), installed by
	// scripts/inspector.sh, on both transports.
	t.Run("Inspector", func(t *testing.T) {
		bin := inspectorBin(t)
		stdio := []string{"--cli", "-e", "SANDQ_PREFIX=" + e.prefix, "-e", "SANDQ_QUEUE_PREFIX=" + e.queuePrefix, "-e", "SANDQ_REDIS_ADDR=" + e.redisAddr,
			"-e", "SANDQ_ARTIFACT_DIR=" + dir, bins.enqueue, "mcp"}
		http := []string{"--cli", a.url + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + key}
		for name, target := range map[string][]string{"stdio": stdio, "http": http} {
			out := runInspector(t, bin, append(target, "--method", "tools/list")...)
			require.Contains(t, out, `"run_code"`, name)
			require.Contains(t, out, `"session_exec"`, name)
			out = runInspector(t, bin, append(target, "--method", "tools/call", "--tool-name", "run_code",
				"--tool-arg", "lang=python", "--tool-arg", "code=print(sum(range(10)))")...)
			require.Contains(t, out, `"status": "succeeded"`, name)
			require.Contains(t, out, `45\n`, name)
		}
	})
}

// inspectorBin is the MCP Inspector installed by scripts/inspector.sh.
func inspectorBin(t *testing.T) string {
	cache := os.Getenv("SANDQ_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "sandq")
	}
	matches, _ := filepath.Glob(filepath.Join(cache, "npm", "inspector-*", "node_modules", ".bin", "mcp-inspector"))
	require.NotEmpty(t, matches, "the MCP Inspector is not installed under %s/npm: run make setup (scripts/inspector.sh)", cache)
	return matches[0]
}

func runInspector(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "mcp.json"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "inspector %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, stderr.String())
	return string(out)
}
