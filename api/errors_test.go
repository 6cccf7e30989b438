package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// requireProblem requires an RFC 9457 problem with status: the media
// type, and type, title, status and detail all present, the status the
// response's.
func requireProblem(t *testing.T, resp *http.Response, body []byte, status int) map[string]any {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, string(body))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), string(body))
	var p map[string]any
	require.NoError(t, json.Unmarshal(body, &p), string(body))
	for _, k := range []string{"type", "title", "status", "detail"} {
		require.Contains(t, p, k, string(body))
	}
	require.Equal(t, "about:blank", p["type"])
	require.Equal(t, http.StatusText(status), p["title"])
	require.EqualValues(t, status, p["status"])
	require.NotEmpty(t, p["detail"])
	return p
}

// TestEveryErrorIsAProblem: unknown paths, wrong methods, unclean paths,
// bodies that are not JSON or of the wrong type or media type, bad
// query and path parameters: every refusal is a problem with its type,
// title, status and detail; a 405 names the methods in Allow.
func TestEveryErrorIsAProblem(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	for _, tt := range []struct {
		name, method, path string
		ctype, body        string
		status             int
		allow, detail      string
	}{
		{name: "unknown path", method: "GET", path: "/v1/no-such-thing", status: 404, detail: "no operation at"},
		{name: "root", method: "GET", path: "/", status: 404},
		{name: "DELETE languages", method: "DELETE", path: "/v1/languages", status: 405, allow: "GET, HEAD"},
		{name: "PUT jobs", method: "PUT", path: "/v1/jobs", status: 405, allow: "POST"},
		{name: "GET jobs", method: "GET", path: "/v1/jobs", status: 405, allow: "POST"},
		{name: "PATCH a job", method: "PATCH", path: "/v1/jobs/x", status: 405, allow: "GET, HEAD"},
		{name: "POST healthz", method: "POST", path: "/healthz", status: 405, allow: "GET, HEAD"},
		{name: "POST metrics", method: "POST", path: "/metrics", status: 405, allow: "GET, HEAD"},
		{name: "dot dot", method: "GET", path: "/v1/jobs/x/../../v1/languages", status: 400, detail: "not clean"},
		{name: "double slash", method: "GET", path: "//v1/languages", status: 400, detail: "not clean"},
		{name: "escaped slash in an id", method: "POST", path: "/v1/jobs/%2F/cancel", status: 404},
		{name: "NUL id", method: "GET", path: "/v1/jobs/%00", status: 422},
		{name: "long id", method: "GET", path: "/v1/jobs/" + strings.Repeat("x", 200), status: 422},
		{name: "bad wait", method: "GET", path: "/v1/jobs/x?wait=abc", status: 422},
		{name: "negative wait", method: "GET", path: "/v1/jobs/x?wait=-5s", status: 422},
		{name: "unknown job", method: "GET", path: "/v1/jobs/x", status: 404},
		{name: "bad JSON", method: "POST", path: "/v1/jobs", ctype: "application/json", body: "{bad", status: 400, detail: "the body is not valid JSON"},
		{name: "trailing data", method: "POST", path: "/v1/jobs", ctype: "application/json", body: `{"lang":"python","code":"1"} x`, status: 400, detail: "not valid JSON"},
		{name: "binary body", method: "POST", path: "/v1/jobs", ctype: "application/json", body: "\xff\xfe\x00", status: 400, detail: "not valid JSON"},
		{name: "huge number", method: "POST", path: "/v1/jobs", ctype: "application/json", body: `{"lang":"python","code":"1","limits":{"timeout_ms":1e999}}`, status: 400},
		{name: "empty body", method: "POST", path: "/v1/jobs", ctype: "application/json", status: 400},
		{name: "array body", method: "POST", path: "/v1/jobs", ctype: "application/json", body: "[]", status: 422},
		{name: "wrong type", method: "POST", path: "/v1/jobs", ctype: "application/json", body: `{"lang":"python","code":1}`, status: 422},
		{name: "XML", method: "POST", path: "/v1/jobs", ctype: "text/xml", body: "<x/>", status: 415},
		{name: "multipart", method: "POST", path: "/v1/jobs", ctype: "multipart/form-data; boundary=x", body: "{}", status: 415},
		{name: "batch not JSON", method: "POST", path: "/v1/batches", ctype: "application/json", body: "{bad", status: 400},
		{name: "session not JSON", method: "POST", path: "/v1/sessions", ctype: "application/json", body: "{bad", status: 400, detail: "not valid JSON"},
		{name: "session file outside", method: "PUT", path: "/v1/sessions/x/files/..%2Fa", body: "x", status: 422},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, b.http.URL+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+key)
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := cl.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			p := requireProblem(t, resp, body, tt.status)
			require.Equal(t, tt.allow, resp.Header.Get("Allow"))
			require.Contains(t, p["detail"], tt.detail)
			if strings.Contains(tt.body, "{bad") {
				require.NotContains(t, string(body), `"value"`, "a body that is not JSON is not echoed back")
			}
		})
	}
}

// TestArtifactPaths: an artifact whose name has a slash downloads with
// the slash as it is (the docs' curl) or escaped; a name that is not a
// clean relative path is refused with a problem, escaped or not; another
// tenant's artifact is not found.
func TestArtifactPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := newAPI(t, func(c *Config) { c.ArtifactDir = dir })
	key := b.key("acme", service.KeyOptions{})
	other := b.key("other", service.KeyOptions{})

	file := filepath.Join(dir, "job-1", "sub", "x.txt")
	require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
	require.NoError(t, os.WriteFile(file, []byte("sub/x.txt's bytes"), 0o644))
	r := jobs.Result{ID: service.StoredID("acme", "job-1"), Tenant: "acme", Status: jobs.StatusSucceeded, Attempts: 1, Lang: "python", FinishedAt: time.Now().UTC(),
		Artifacts: []jobs.Artifact{{Name: "sub/x.txt", Kind: "file", URL: file, Size: 17}}}
	_, _, err := b.client.Store().Put(context.Background(), r)
	require.NoError(t, err)

	for _, p := range []string{"sub/x.txt", "sub%2Fx.txt", "sub%2fx.txt"} {
		resp, body := b.raw("GET", "/v1/jobs/job-1/artifacts/"+p, key, nil)
		require.Equal(t, 200, resp.StatusCode, "%s: %s", p, body)
		require.Equal(t, "sub/x.txt's bytes", string(body), p)
	}
	resp, body := b.raw("GET", "/v1/jobs/job-1/artifacts/sub/x.txt", other, nil)
	requireProblem(t, resp, body, 404)
	resp, body = b.raw("GET", "/v1/jobs/job-1/artifacts/sub/nope.txt", key, nil)
	requireProblem(t, resp, body, 404)

	for _, tt := range []struct {
		path   string
		status int
	}{
		{"../../../etc/passwd", 400}, // the mux's clean-path redirect, refused
		{"sub/../sub/x.txt", 400},
		{"sub//x.txt", 400},
		{"./sub/x.txt", 400},
		{"%2e%2e%2f%2e%2e%2fetc%2fpasswd", 422},
		{"..%2F..%2Fetc%2Fpasswd", 422},
		{"sub%2F..%2Fsub%2Fx.txt", 422},
		{"%2Fetc%2Fpasswd", 422},
		{"sub%5Cx.txt", 422},
		{"..%5C..%5Cetc", 422},
		{"sub%00x.txt", 422},
		{"sub%2F%2Fx.txt", 422},
	} {
		resp, body := b.raw("GET", "/v1/jobs/job-1/artifacts/"+tt.path, key, nil)
		p := requireProblem(t, resp, body, tt.status)
		if tt.status == 422 {
			require.Equal(t, "invalid artifact name", p["detail"], tt.path)
			require.Contains(t, string(body), `"location":"path.name"`, tt.path)
		}
	}
}

// TestManyUnknownFieldsAnswerSmall: a body with thousands of unknown
// fields (huma reports each, with the whole object as its value) is
// answered at once with a bounded problem: at most maxProblemErrors
// errors, a count of the rest, no object echoed; on every body an
// operation validates.
func TestManyUnknownFieldsAnswerSmall(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	body := map[string]any{"lang": "python", "code": "print(1)"}
	const fields = 20000
	for i := range fields {
		body[fmt.Sprintf("f%d", i)] = strings.Repeat("v", 300)
	}
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	for _, path := range []string{"/v1/jobs", "/v1/sessions", "/v1/environments"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			started := time.Now()
			resp, got := b.raw("POST", path, key, raw)
			took := time.Since(started)
			p := requireProblem(t, resp, got, http.StatusUnprocessableEntity)
			require.Less(t, len(got), 64<<10, "a %d-byte problem for a %d-byte body", len(got), len(raw))
			require.Less(t, took, 10*time.Second)
			errs, _ := p["errors"].([]any)
			require.Len(t, errs, maxProblemErrors+1, string(got[:min(len(got), 2000)]))
			var more int
			_, err := fmt.Sscanf(errs[maxProblemErrors].(map[string]any)["message"].(string), "and %d more errors", &more)
			require.NoError(t, err)
			require.GreaterOrEqual(t, more, fields-maxProblemErrors, "every unknown field counted")
			for _, e := range errs[:maxProblemErrors] {
				require.NotContains(t, e, "value", "an unknown field's error echoes no object")
			}
		})
	}
}

// TestProblemValuesAreBounded: a long string value is cut at a rune
// boundary; an object or array is not echoed.
func TestProblemValuesAreBounded(t *testing.T) {
	long := strings.Repeat("é", maxProblemValue)
	got := boundValue(long).(string)
	require.True(t, utf8.ValidString(got))
	require.LessOrEqual(t, len(got), maxProblemValue+len("…"))
	require.True(t, strings.HasSuffix(got, "…"))
	require.Equal(t, "short", boundValue("short"))
	require.Equal(t, 3, boundValue(3))
	require.Nil(t, boundValue(map[string]any{"a": 1}))
	require.Nil(t, boundValue([]any{1}))
}
