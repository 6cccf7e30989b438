package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/service"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// sessionProblem is a 410's problem: the session's state and reason in
// its errors.
type sessionProblem struct {
	problemBody
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
		Value    string `json:"value"`
	} `json:"errors"`
}

// raw sends a request without the OpenAPI check (a path the validator
// cannot route: escaped slashes in a wildcard).
func (b *apiBundle) raw(method, path, key string, body []byte) (*http.Response, []byte) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.http.URL+path, bytes.NewReader(body))
	require.NoError(b.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp, data
}

func TestSessionsWithoutWorker(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	readOnly := b.key("acme", service.KeyOptions{Scopes: []string{ScopeRead}})

	resp, body := b.do("POST", "/v1/sessions", key, map[string]any{"lang": "python"})
	require.Equal(t, 503, resp.StatusCode, string(body))
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Contains(t, decode[problemBody](t, body).Detail, "no free session slot")

	resp, _ = b.do("POST", "/v1/sessions", "", map[string]any{"lang": "python"})
	require.Equal(t, 401, resp.StatusCode)
	resp, body = b.do("POST", "/v1/sessions", readOnly, map[string]any{"lang": "python"})
	require.Equal(t, 403, resp.StatusCode, string(body))
	require.Contains(t, decode[problemBody](t, body).Detail, "jobs:write")
	resp, body = b.do("GET", "/v1/sessions", readOnly, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.JSONEq(t, `{"sessions": []}`, string(body))

	for _, tt := range []struct {
		name     string
		spec     map[string]any
		location string
		msg      string
	}{
		{"unknown language", map[string]any{"lang": "cobol"}, "body.lang", "unknown language"},
		{"no sessions", map[string]any{"lang": "go"}, "body.lang", "go has no sessions"},
		{"body tenant", map[string]any{"lang": "python", "tenant": "other"}, "body.tenant", "the tenant is the API key's"},
		{"id too long", map[string]any{"lang": "python", "id": strings.Repeat("x", 120)}, "body.id", "the cap is 94"},
		{"file by key", map[string]any{"lang": "python", "files": []map[string]any{{"path": "a", "key": "x"}}}, "body.files[0].key", "inline"},
		{"file outside", map[string]any{"lang": "python", "files": []map[string]any{{"path": "../a", "content_b64": "eA=="}}}, "body.files[0].path", ""},
		{"lifetime", map[string]any{"lang": "python", "lifetime_seconds": 100000}, "body.lifetime_seconds", "exceeds the cap"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := b.do("POST", "/v1/sessions", key, tt.spec)
			require.Equal(t, 422, resp.StatusCode, string(body))
			p := decode[problemBody](t, body)
			require.NotEmpty(t, p.Errors, string(body))
			require.Equal(t, tt.location, p.Errors[0].Location, string(body))
			require.Contains(t, p.Errors[0].Message, tt.msg)
		})
	}

	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/sessions/nope"}, {"DELETE", "/v1/sessions/nope"}, {"POST", "/v1/sessions/nope/interrupt"},
		{"GET", "/v1/sessions/nope/files"}, {"GET", "/v1/sessions/nope/files/a.txt"},
	} {
		resp, body := b.do(req.method, req.path, key, nil)
		require.Equal(t, 404, resp.StatusCode, "%s %s: %s", req.method, req.path, body)
		require.Contains(t, decode[problemBody](t, body).Detail, "no session nope")
	}
	resp, body = b.do("POST", "/v1/sessions/nope/cells", key, map[string]any{"code": "print(1)"})
	require.Equal(t, 404, resp.StatusCode, string(body))
	resp, body = b.do("PUT", "/v1/sessions/nope/files/a.txt", key, []byte("x"), "Content-Type", "application/octet-stream")
	require.Equal(t, 404, resp.StatusCode, string(body))

	// Paths outside the work dir: 422 before the session is looked up.
	resp, body = b.do("GET", "/v1/sessions/nope/files?dir=../etc", key, nil)
	require.Equal(t, 422, resp.StatusCode, string(body))
	require.Equal(t, "query.dir", decode[problemBody](t, body).Errors[0].Location)
	for _, p := range []string{"..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "a%2F..%2F..%2Fb"} {
		resp, body = b.raw("GET", "/v1/sessions/nope/files/"+p, key, nil)
		require.Equal(t, 422, resp.StatusCode, "%s: %s", p, body)
		require.Equal(t, "path.path", decode[problemBody](t, body).Errors[0].Location)
		resp, body = b.raw("PUT", "/v1/sessions/nope/files/"+p, key, []byte("x"))
		require.Equal(t, 422, resp.StatusCode, "%s: %s", p, body)
	}
}

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	w := b.ns.StartFakeSessionWorker(t, 4)
	key := b.key("acme", service.KeyOptions{})

	resp, body := b.do("POST", "/v1/sessions", key, map[string]any{"id": "s1", "lang": "py",
		"files": []map[string]any{{"path": "in/data.csv", "content_b64": "YSxiCg=="}}})
	require.Equal(t, 201, resp.StatusCode, string(body))
	require.Equal(t, "/v1/sessions/s1", resp.Header.Get("Location"))
	info := decode[jobs.SessionInfo](t, body)
	require.Equal(t, "s1", info.ID, "the tenant's own ID")
	require.Equal(t, "acme", info.Tenant)
	require.Equal(t, "python", info.Lang)
	require.Equal(t, jobs.SessionReady, info.State)
	require.Equal(t, 600, info.IdleTTLSeconds)
	internal := service.StoredID("acme", "s1")
	require.Equal(t, map[string][]byte{"in/data.csv": []byte("a,b\n")}, w.Files(internal), "stored under the tenant's namespace")

	resp, body = b.do("POST", "/v1/sessions", key, map[string]any{"id": "s1", "lang": "python"})
	require.Equal(t, 409, resp.StatusCode, string(body))

	// Cells: a result whatever the cell did.
	resp, body = b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "x = 1\n"})
	require.Equal(t, 200, resp.StatusCode, string(body))
	r := decode[jobs.CellResult](t, body)
	require.Equal(t, jobs.CellOK, r.Status)
	require.Equal(t, "x = 1\n", r.Stdout)
	require.Equal(t, 1, r.ExecutionCount)
	require.Equal(t, jobs.SessionReady, r.Session)
	resp, body = b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "# ERROR"})
	require.Equal(t, 200, resp.StatusCode, string(body))
	r = decode[jobs.CellResult](t, body)
	require.Equal(t, jobs.CellError, r.Status)
	require.Equal(t, "ValueError", r.Error.Name)
	resp, body = b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "# DISPLAY"})
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Len(t, decode[jobs.CellResult](t, body).Results, 2)
	resp, body = b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "x", "timeout_ms": -1})
	require.Equal(t, 422, resp.StatusCode, string(body))

	// One cell at a time: 409 while one runs; interrupt ends it.
	var wg sync.WaitGroup
	var sleeping jobs.CellResult
	wg.Go(func() {
		resp, body := b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "# SLEEP"})
		if resp.StatusCode == 200 {
			_ = json.Unmarshal(body, &sleeping)
		}
	})
	require.Eventually(t, func() bool { return w.Busy(internal) }, 10*time.Second, 10*time.Millisecond)
	resp, body = b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "print(2)"})
	require.Equal(t, 409, resp.StatusCode, string(body))
	resp, body = b.do("POST", "/v1/sessions/s1/interrupt", key, nil)
	require.Equal(t, 202, resp.StatusCode, string(body))
	wg.Wait()
	require.Equal(t, jobs.CellError, sleeping.Status)
	require.Equal(t, "KeyboardInterrupt", sleeping.Error.Name)

	// Files, byte-exact, slashes as they are or escaped.
	data := []byte{0, 1, 0xff, 'x', '\n'}
	resp, body = b.do("PUT", "/v1/sessions/s1/files/out/a.bin", key, data, "Content-Type", "application/octet-stream")
	require.Equal(t, 204, resp.StatusCode, string(body))
	resp, body = b.do("PUT", "/v1/sessions/s1/files/empty", key, []byte{}, "Content-Type", "application/octet-stream")
	require.Equal(t, 204, resp.StatusCode, "an empty file: %s", body)
	resp, body = b.do("GET", "/v1/sessions/s1/files/out/a.bin", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, data, body)
	require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.Equal(t, `attachment; filename="a.bin"`, resp.Header.Get("Content-Disposition"))
	resp, body = b.raw("GET", "/v1/sessions/s1/files/out%2Fa.bin", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, data, body)
	resp, body = b.do("GET", "/v1/sessions/s1/files", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	var paths []string
	for _, f := range decode[SessionFiles](t, body).Files {
		paths = append(paths, f.Path)
	}
	require.Equal(t, []string{"empty", "in/data.csv", "out/a.bin"}, paths)
	resp, body = b.do("GET", "/v1/sessions/s1/files?dir=out", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Len(t, decode[SessionFiles](t, body).Files, 1)
	resp, body = b.do("PUT", "/v1/sessions/s1/files/big", key, make([]byte, jobs.MaxSessionFileBytes+1), "Content-Type", "application/octet-stream")
	require.Equal(t, 413, resp.StatusCode, string(body))

	resp, body = b.do("GET", "/v1/sessions", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	list := decode[SessionList](t, body).Sessions
	require.Len(t, list, 1)
	require.Equal(t, "s1", list[0].ID)
	require.Equal(t, 4, list[0].ExecutionCount)

	// Close: 200 with the final record; then the session is gone (410),
	// its record still readable; closing again is not an error.
	resp, body = b.do("DELETE", "/v1/sessions/s1", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, jobs.SessionClosed, decode[jobs.SessionInfo](t, body).State)
	resp, body = b.do("POST", "/v1/sessions/s1/cells", key, map[string]any{"code": "print(x)"})
	require.Equal(t, 410, resp.StatusCode, string(body))
	p := decode[sessionProblem](t, body)
	require.Contains(t, p.Detail, "session s1 has ended (closed)")
	require.Equal(t, "session.state", p.Errors[0].Location)
	require.Equal(t, "closed", p.Errors[0].Value)
	resp, _ = b.do("GET", "/v1/sessions/s1/files/empty", key, nil)
	require.Equal(t, 410, resp.StatusCode)
	resp, body = b.do("DELETE", "/v1/sessions/s1", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	resp, body = b.do("GET", "/v1/sessions/s1", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, jobs.SessionClosed, decode[jobs.SessionInfo](t, body).State)

	// A cell that kills the interpreter: a result saying so, then 410 oom.
	resp, body = b.do("POST", "/v1/sessions", key, map[string]any{"lang": "python"})
	require.Equal(t, 201, resp.StatusCode, string(body))
	id := decode[jobs.SessionInfo](t, body).ID
	require.NotContains(t, id, ".", "a generated ID, as the tenant knows it")
	resp, body = b.do("POST", "/v1/sessions/"+id+"/cells", key, map[string]any{"code": "# OOM"})
	require.Equal(t, 200, resp.StatusCode, string(body))
	r = decode[jobs.CellResult](t, body)
	require.Equal(t, jobs.CellSessionEnded, r.Status)
	require.Equal(t, jobs.SessionOOM, r.Session)
	resp, body = b.do("POST", "/v1/sessions/"+id+"/cells", key, map[string]any{"code": "x"})
	require.Equal(t, 410, resp.StatusCode, string(body))
	require.Equal(t, "oom", decode[sessionProblem](t, body).Errors[0].Value)
}

func TestSessionTenantIsolationAndLoss(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	w := b.ns.StartFakeSessionWorker(t, 4)
	a, other := b.key("tenant-a", service.KeyOptions{}), b.key("tenant-b", service.KeyOptions{})
	resp, body := b.do("POST", "/v1/sessions", a, map[string]any{"id": "nb", "lang": "python"})
	require.Equal(t, 201, resp.StatusCode, string(body))
	resp, body = b.do("PUT", "/v1/sessions/nb/files/secret.txt", a, []byte("A's"), "Content-Type", "application/octet-stream")
	require.Equal(t, 204, resp.StatusCode, string(body))

	for _, id := range []string{"nb", service.StoredID("tenant-a", "nb")} {
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/sessions/" + id, nil}, {"DELETE", "/v1/sessions/" + id, nil},
			{"POST", "/v1/sessions/" + id + "/cells", map[string]any{"code": "print(secret)"}},
			{"POST", "/v1/sessions/" + id + "/interrupt", nil}, {"GET", "/v1/sessions/" + id + "/files", nil},
			{"GET", "/v1/sessions/" + id + "/files/secret.txt", nil},
		} {
			resp, body := b.do(req.method, req.path, other, req.body)
			require.Equal(t, 404, resp.StatusCode, "%s %s: %s", req.method, req.path, body)
		}
	}
	resp, body = b.do("GET", "/v1/sessions", other, nil)
	require.Equal(t, 200, resp.StatusCode)
	require.JSONEq(t, `{"sessions": []}`, string(body))
	resp, body = b.do("POST", "/v1/sessions", other, map[string]any{"id": "nb", "lang": "python"})
	require.Equal(t, 201, resp.StatusCode, "B's ID is its own: %s", body)
	resp, body = b.do("GET", "/v1/sessions/nb/files/secret.txt", a, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, "A's", string(body), "A's session is untouched")

	// The worker dies: its sessions read as lost, and cells are 410.
	require.NoError(t, w.Stop(context.Background()))
	resp, body = b.do("GET", "/v1/sessions/nb", a, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	info := decode[jobs.SessionInfo](t, body)
	require.Equal(t, jobs.SessionLost, info.State)
	require.Contains(t, info.Reason, "stopped")
	resp, body = b.do("POST", "/v1/sessions/nb/cells", a, map[string]any{"code": "x"})
	require.Equal(t, 410, resp.StatusCode, string(body))
	require.Equal(t, "lost", decode[sessionProblem](t, body).Errors[0].Value)
}

// A tenant's open sessions are capped (MaxSessions): one tenant cannot take
// every worker's slots; a closed one frees its place; other tenants are
// not affected.
func TestSessionTenantCap(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.MaxSessions = 2 })
	b.ns.StartFakeSessionWorker(t, 10)
	a, other := b.key("acme", service.KeyOptions{}), b.key("umbrella", service.KeyOptions{})
	for _, id := range []string{"one", "two"} {
		resp, body := b.do("POST", "/v1/sessions", a, map[string]any{"id": id, "lang": "python"})
		require.Equal(t, 201, resp.StatusCode, string(body))
	}
	resp, body := b.do("POST", "/v1/sessions", a, map[string]any{"id": "three", "lang": "python"})
	require.Equal(t, 429, resp.StatusCode, string(body))
	require.Contains(t, string(body), "the cap is 2")
	resp, body = b.do("POST", "/v1/sessions", other, map[string]any{"id": "three", "lang": "python"})
	require.Equal(t, 201, resp.StatusCode, "another tenant is not affected: %s", body)
	resp, _ = b.do("DELETE", "/v1/sessions/one", a, nil)
	require.Equal(t, 200, resp.StatusCode)
	resp, body = b.do("POST", "/v1/sessions", a, map[string]any{"id": "three", "lang": "python"})
	require.Equal(t, 201, resp.StatusCode, "a closed session frees its place: %s", body)
}
