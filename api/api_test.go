package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/service"

	"github.com/sandq/sandq/client"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/jobs"
)

// apiBundle is an API server over a private Redis namespace, with no
// worker: tests store results themselves (a worker's part), so every
// endpoint is driven through real HTTP and real Redis in milliseconds.
// Every response a test reads is validated against the server's own
// OpenAPI document.
type apiBundle struct {
	t      *testing.T
	ns     *jobstest.Namespace
	client *client.Client
	srv    *Server
	http   *httptest.Server
	keys   *service.Keys
	spec   validator.Validator
}

func newAPI(t *testing.T, mod func(*Config)) *apiBundle {
	t.Helper()
	ns := jobstest.NewNamespace(t, "api")
	b := &apiBundle{t: t, ns: ns, client: ns.Client(t), keys: service.NewKeys(ns.Store)}
	cfg := Config{Client: b.client, Webhooks: service.WebhookConfig{AllowHosts: []string{"127.0.0.1"}, Timeout: 2 * time.Second}}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	b.srv = srv
	b.http = httptest.NewServer(srv.Handler())
	t.Cleanup(b.http.Close)
	spec, err := json.Marshal(srv.OpenAPI())
	require.NoError(t, err)
	doc, err := libopenapi.NewDocument(spec)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	b.spec = v
	return b
}

func (b *apiBundle) key(tenant string, o service.KeyOptions) string {
	b.t.Helper()
	key, _, err := b.keys.Create(context.Background(), tenant, o)
	require.NoError(b.t, err)
	return key
}

// do sends a request and returns the response with its body read; the
// response is checked against the OpenAPI document unless it is a stream.
func (b *apiBundle) do(method, path, key string, body any, hdr ...string) (*http.Response, []byte) {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(v)
	case string:
		rd = strings.NewReader(v)
	default:
		j, err := json.Marshal(v)
		require.NoError(b.t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.http.URL+path, rd)
	require.NoError(b.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	require.NoError(b.t, err)
	data, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/problem+json") {
		resp.Body = io.NopCloser(bytes.NewReader(data))
		req.Body = nil
		if rd != nil {
			req.Body = io.NopCloser(bytes.NewReader(mustJSON(b.t, body)))
		}
		ok, verrs := b.spec.ValidateHttpResponse(req, resp)
		for _, e := range verrs {
			b.t.Errorf("%s %s → %d: response does not match the OpenAPI document: %s (%s)", method, path, resp.StatusCode, e.Message, e.Reason)
		}
		_ = ok
	}
	return resp, data
}

func mustJSON(t *testing.T, v any) []byte {
	switch v := v.(type) {
	case []byte:
		return v
	case string:
		return []byte(v)
	}
	j, err := json.Marshal(v)
	require.NoError(t, err)
	return j
}

type problemBody struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

func decode[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(data, &v), string(data))
	return v
}

// finish stores a final result for the tenant's job, as a worker would.
func (b *apiBundle) finish(tenant, id string, status jobs.Status, stdout string) {
	b.t.Helper()
	r := jobs.Result{ID: service.StoredID(tenant, id), Status: status, Attempts: 1, Lang: "python", FinishedAt: time.Now().UTC()}
	r.SetStdout([]byte(stdout))
	_, _, err := b.client.Store().Put(context.Background(), r)
	require.NoError(b.t, err)
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	spec, err := json.Marshal(b.srv.OpenAPI())
	require.NoError(t, err)
	doc, err := libopenapi.NewDocument(spec)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	for _, e := range verrs {
		t.Errorf("%s: %s", e.Message, e.Reason)
	}
	require.True(t, ok)
	require.Contains(t, string(spec), `"openapi":"3.1.0"`)
	for _, path := range []string{"/v1/jobs", "/v1/jobs/{id}", "/v1/jobs/{id}/cancel", "/v1/jobs/{id}/events",
		"/v1/jobs/{id}/artifacts", "/v1/jobs/{id}/artifacts/{name}", "/v1/batches", "/v1/batches/{id}",
		"/v1/batches/{id}/results", "/v1/languages", "/v1/sessions", "/v1/sessions/{id}", "/v1/sessions/{id}/cells",
		"/v1/sessions/{id}/interrupt", "/v1/sessions/{id}/files", "/v1/sessions/{id}/files/{path}"} {
		require.Contains(t, string(spec), `"`+path+`"`)
	}
	resp, body := b.do("GET", "/openapi.json", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	require.JSONEq(t, string(spec), string(body), "the document served is the one generated")
	resp, body = b.do("GET", "/docs", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, string(body), "openapi")
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	full := b.key("acme", service.KeyOptions{})
	readOnly := b.key("acme", service.KeyOptions{Scopes: []string{ScopeRead}})

	resp, body := b.do("POST", "/v1/jobs", "", map[string]any{"lang": "python", "code": "print(1)"})
	require.Equal(t, 401, resp.StatusCode, string(body))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
	resp, _ = b.do("GET", "/v1/languages", "sqk_nope_nope", nil)
	require.Equal(t, 401, resp.StatusCode)

	resp, body = b.do("POST", "/v1/jobs", readOnly, map[string]any{"lang": "python", "code": "print(1)"})
	require.Equal(t, 403, resp.StatusCode, string(body))
	require.Contains(t, decode[problemBody](t, body).Detail, "jobs:write")
	resp, _ = b.do("GET", "/v1/languages", readOnly, nil)
	require.Equal(t, 200, resp.StatusCode)

	// Revoked: 401 from then on.
	keys, err := b.keys.List(context.Background())
	require.NoError(t, err)
	require.Len(t, keys, 2)
	for _, k := range keys {
		require.NoError(t, b.keys.Revoke(context.Background(), k.ID))
	}
	resp, _ = b.do("GET", "/v1/languages", full, nil)
	require.Equal(t, 401, resp.StatusCode)
}

func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})

	resp, body := b.do("POST", "/v1/jobs", key, map[string]any{"id": "job-1", "lang": "py", "code": "print(1)", "tags": map[string]string{"k": "v"}})
	require.Equal(t, 202, resp.StatusCode, string(body))
	require.Equal(t, "/v1/jobs/job-1", resp.Header.Get("Location"))
	v := decode[JobView](t, body)
	require.Equal(t, "job-1", v.ID, "the tenant's own ID, not the stored one")
	require.Equal(t, jobs.StatusQueued, v.Status)
	require.Equal(t, "python", v.Lang)

	// The job is stored under the tenant's namespace, with the tenant.
	stored, err := b.client.Get(context.Background(), service.StoredID("acme", "job-1"))
	require.NoError(t, err)
	require.Equal(t, jobs.StatusQueued, stored.Status)

	resp, body = b.do("POST", "/v1/jobs", key, map[string]any{"id": "job-1", "lang": "python", "code": "print(2)"})
	require.Equal(t, 409, resp.StatusCode, string(body))

	resp, body = b.do("GET", "/v1/jobs/job-1", key, nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, jobs.StatusQueued, decode[JobView](t, body).Status)

	// A long-poll returns when the job ends.
	go func() {
		time.Sleep(200 * time.Millisecond)
		b.finish("acme", "job-1", jobs.StatusSucceeded, "1\n")
	}()
	start := time.Now()
	resp, body = b.do("GET", "/v1/jobs/job-1?wait=20s", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	v = decode[JobView](t, body)
	require.Equal(t, jobs.StatusSucceeded, v.Status)
	require.Equal(t, "1\n", v.Stdout)
	require.Less(t, time.Since(start), 10*time.Second, "woken by the subscription, not the 20 s wait")

	// A wait that runs out: 202.
	resp, _ = b.do("POST", "/v1/jobs?wait=300ms", key, map[string]any{"lang": "python", "code": "print(1)"})
	require.Equal(t, 202, resp.StatusCode)
	resp, body = b.do("GET", "/v1/jobs/job-1?wait=forever", key, nil)
	require.Equal(t, 422, resp.StatusCode)
	require.Equal(t, "query.wait", decode[problemBody](t, body).Errors[0].Location)

	// Cancel: queued → canceled; again → 409; unknown → 404.
	b.do("POST", "/v1/jobs", key, map[string]any{"id": "job-2", "lang": "python", "code": "x"})
	resp, body = b.do("POST", "/v1/jobs/job-2/cancel", key, nil)
	require.Equal(t, 202, resp.StatusCode, string(body))
	require.Equal(t, jobs.StatusCanceled, decode[JobView](t, body).Status)
	resp, _ = b.do("POST", "/v1/jobs/job-2/cancel", key, nil)
	require.Equal(t, 409, resp.StatusCode)
	resp, _ = b.do("POST", "/v1/jobs/nope/cancel", key, nil)
	require.Equal(t, 404, resp.StatusCode)
	resp, _ = b.do("GET", "/v1/jobs/nope", key, nil)
	require.Equal(t, 404, resp.StatusCode)
}

func TestInvalidJobs(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.MaxJobBytes = 64 << 10 })
	key := b.key("acme", service.KeyOptions{MaxLimits: jobs.Limits{MemoryMB: 128}})
	for _, tt := range []struct {
		job      map[string]any
		location string
		msg      string
	}{
		{map[string]any{"lang": "cobol", "code": "x"}, "body.lang", "unknown language"},
		{map[string]any{"lang": "python", "code": "x", "tenant": "other"}, "body.tenant", "the tenant is the API key's"},
		{map[string]any{"lang": "python", "code": "x", "limits": map[string]any{"memory_mb": 256}}, "body.limits.memory_mb", "128"},
		{map[string]any{"lang": "python", "code": "x", "files": []map[string]any{{"path": "a", "key": "../../sandq/x"}}}, "body.files[0].key", "clean relative path"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://10.1.2.3/hook"}, "body.callback_url", "private"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://169.254.169.254/latest"}, "body.callback_url", "link-local"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "file:///etc/passwd"}, "body.callback_url", "http or https"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://0.1.2.3:8080/"}, "body.callback_url", "private"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://[::ffff:10.0.0.1]/"}, "body.callback_url", "private"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://[64:ff9b::a00:1]/"}, "body.callback_url", "private"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://[::1]:9/"}, "body.callback_url", "private"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://[::127.0.0.1]/"}, "body.callback_url", "private"},
		{map[string]any{"lang": "python", "code": "x", "callback_url": "http://[::ffff:0:127.0.0.1]/"}, "body.callback_url", "private"},
		{map[string]any{"id": "..", "lang": "python", "code": "x"}, "body.id", `".." is reserved`},
		{map[string]any{"id": ".", "lang": "python", "code": "x"}, "body.id", `"." is reserved`},
		{map[string]any{"id": "a b", "lang": "python", "code": "x"}, "body.id", `"a b" has character ' ' at byte 1`},
	} {
		resp, body := b.do("POST", "/v1/jobs", key, tt.job)
		require.Equal(t, 422, resp.StatusCode, string(body))
		p := decode[problemBody](t, body)
		require.NotEmpty(t, p.Errors, string(body))
		require.Equal(t, tt.location, p.Errors[0].Location, string(body))
		require.Contains(t, p.Errors[0].Message, tt.msg)
	}
	// A session's and a batch's ID follow the same rule (links to them are
	// built from it).
	resp, body := b.do("POST", "/v1/sessions", key, map[string]any{"id": ".", "lang": "python"})
	require.Equal(t, 422, resp.StatusCode, string(body))
	require.Contains(t, string(body), `\".\" is reserved`)
	resp, body = b.do("POST", "/v1/batches?id=..", key, []map[string]any{{"lang": "python", "code": "x"}})
	require.Equal(t, 422, resp.StatusCode, string(body))
	require.Contains(t, string(body), `\"..\" is reserved`)
	resp, body = b.do("POST", "/v1/jobs", key, `{"lang":"python","code":"x","rm_rf":true}`)
	require.Equal(t, 422, resp.StatusCode, string(body), "unknown fields are refused")
	resp, body = b.do("POST", "/v1/jobs", key, map[string]any{"lang": "python", "code": strings.Repeat("x", 100<<10)})
	require.Equal(t, 413, resp.StatusCode, string(body))

	// A key's cap also bounds the limits a job leaves to the defaults.
	resp, body = b.do("POST", "/v1/jobs", key, map[string]any{"id": "capped", "lang": "python", "code": "x"})
	require.Equal(t, 202, resp.StatusCode, string(body))
	task, err := b.ns.RDB.Keys(context.Background(), "asynq:{"+b.ns.Prefix+":default}:t:*capped").Result()
	require.NoError(t, err)
	require.Len(t, task, 1)
	payload, err := b.ns.RDB.HGet(context.Background(), task[0], "msg").Result()
	require.NoError(t, err)
	require.Contains(t, payload, `"memory_mb":128`)
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	a, other := b.key("tenant-a", service.KeyOptions{}), b.key("tenant-b", service.KeyOptions{})
	resp, _ := b.do("POST", "/v1/jobs", a, map[string]any{"id": "report", "lang": "python", "code": "print('a')"})
	require.Equal(t, 202, resp.StatusCode)
	b.finish("tenant-a", "report", jobs.StatusSucceeded, "A's secret\n")

	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/jobs/report"}, {"GET", "/v1/jobs/report/artifacts"}, {"GET", "/v1/jobs/report/events"},
	} {
		resp, _ := b.do(req.method, req.path, other, nil)
		require.Equal(t, 404, resp.StatusCode, "%s %s", req.method, req.path)
	}
	// B cannot cancel A's job, and its own "report" is another job.
	resp, _ = b.do("POST", "/v1/jobs/report/cancel", other, nil)
	require.Equal(t, 404, resp.StatusCode)
	resp, body := b.do("POST", "/v1/jobs", other, map[string]any{"id": "report", "lang": "python", "code": "print('b')"})
	require.Equal(t, 202, resp.StatusCode, "B's ID is its own: no squatting either way: %s", body)
	resp, body = b.do("GET", "/v1/jobs/report", a, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, "A's secret\n", decode[JobView](t, body).Stdout, "A's job is untouched")
	// Nor can B reach A's stored ID by spelling it.
	resp, _ = b.do("GET", "/v1/jobs/"+service.StoredID("tenant-a", "report"), other, nil)
	require.Equal(t, 404, resp.StatusCode)
}

func TestRateLimitAndTenantCap(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	slow := b.key("slow", service.KeyOptions{RatePerSecond: 3})
	codes := map[int]int{}
	var retry string
	for range 10 {
		resp, _ := b.do("GET", "/v1/languages", slow, nil)
		codes[resp.StatusCode]++
		if resp.StatusCode == 429 {
			retry = resp.Header.Get("Retry-After")
		}
	}
	require.Positive(t, codes[429], "%v", codes)
	require.LessOrEqual(t, codes[200], 6, "at most 3 a second (the burst may straddle a second)")
	require.Equal(t, "1", retry)

	capped := b.key("capped", service.KeyOptions{MaxQueued: 2})
	for i := range 2 {
		resp, body := b.do("POST", "/v1/jobs", capped, map[string]any{"id": fmt.Sprint("j", i), "lang": "python", "code": "x"})
		require.Equal(t, 202, resp.StatusCode, string(body))
	}
	resp, body := b.do("POST", "/v1/jobs", capped, map[string]any{"lang": "python", "code": "x"})
	require.Equal(t, 429, resp.StatusCode, string(body))
	p := decode[problemBody](t, body)
	require.Contains(t, p.Detail, "2 jobs queued or running; its cap is 2")
	require.Contains(t, string(body), `{"message":"the quota reached","location":"quota","value":"jobs"}`, "the problem names the quota")

	// The metrics show each tenant's refusals by quota, and its ledger:
	// to the operator's scraper's key, not to a tenant's.
	resp, body = b.do("GET", "/metrics", capped, nil)
	require.Equal(t, 403, resp.StatusCode, string(body))
	require.Contains(t, string(body), "lacks the metrics:read scope")
	resp, _ = b.do("GET", "/metrics", "", nil)
	require.Equal(t, 401, resp.StatusCode)
	scraper := b.key("ops", service.KeyOptions{Scopes: []string{service.ScopeMetrics}})
	resp, body = b.do("GET", "/metrics", scraper, nil)
	require.Equal(t, 200, resp.StatusCode)
	for _, want := range []string{
		`sandq_tenant_refusals_total{quota="jobs",tenant="capped"} 1`,
		`sandq_tenant_refusals_total{quota="rate",tenant="slow"} ` + fmt.Sprint(codes[429]),
		`sandq_tenant_jobs{state="released",tenant="capped"} 2`,
		`sandq_tenant_jobs{state="held",tenant="capped"} 0`,
		`sandq_tenant_held_bytes{tenant="capped"} `,
	} {
		require.Contains(t, string(body), want)
	}
	b.finish("capped", "j0", jobs.StatusSucceeded, "")
	resp, _ = b.do("POST", "/v1/jobs", capped, map[string]any{"lang": "python", "code": "x"})
	require.Equal(t, 202, resp.StatusCode, "a finished job frees its place")
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

func readSSE(t *testing.T, url, key, lastID string) []sseEvent {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
				if cur.event == "result" {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

// TestRevokedKeyEndsItsStreams: revoking a key ends the event streams it
// holds open (within keyRecheck), with no result; another key's stream
// of its own job goes on.
func TestRevokedKeyEndsItsStreams(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	other := b.key("acme", service.KeyOptions{})
	b.submit(key, "waiting")
	open := func(k string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*keyRecheck)
		req, err := http.NewRequestWithContext(ctx, "GET", b.http.URL+"/v1/jobs/waiting/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		return resp, cancel
	}
	revoked, cancel := open(key)
	defer cancel()
	kept, cancelKept := open(other)
	defer cancelKept()
	require.NoError(t, b.keys.Revoke(context.Background(), strings.Split(key, "_")[1]))
	start := time.Now()
	body, err := io.ReadAll(revoked.Body) // ends when the server ends the stream
	require.NoError(t, err, "the stream ended by the server, not by the test's deadline")
	require.Less(t, time.Since(start), 2*keyRecheck)
	require.NotContains(t, string(body), "event: result")
	require.Contains(t, string(body), "event: status")

	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(kept.Body); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the other key's stream ended too: %v", err)
	case <-time.After(keyRecheck + time.Second):
	}
}

func TestEventsWithResume(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	resp, _ := b.do("POST", "/v1/jobs", key, map[string]any{"id": "live", "lang": "python", "code": "x", "stream": true})
	require.Equal(t, 202, resp.StatusCode)
	id := service.StoredID("acme", "live")
	st := b.client.Store()
	go func() {
		ctx := context.Background()
		time.Sleep(100 * time.Millisecond)
		_, _, _ = st.Put(ctx, jobs.Result{ID: id, Status: jobs.StatusRunning, Attempts: 1})
		_ = st.AppendStream(ctx, id, time.Minute, []jobs.StreamEntry{{Attempt: 1, Step: "run", Stream: "stdout", Data: []byte("one\n")}})
		time.Sleep(100 * time.Millisecond)
		_ = st.AppendStream(ctx, id, time.Minute, []jobs.StreamEntry{{Attempt: 1, Step: "run", Stream: "stdout", Offset: 4, Data: []byte{0xff, 0xfe}}})
		r := jobs.Result{ID: id, Status: jobs.StatusSucceeded, Attempts: 1}
		r.SetStdout([]byte("one\n\xff\xfe"))
		_, _, _ = st.Put(ctx, r)
		_ = st.EndStream(ctx, id, 1, jobs.StatusSucceeded, time.Minute)
	}()
	events := readSSE(t, b.http.URL+"/v1/jobs/live/events", key, "")
	var kinds []string
	var outputs []OutputEvent
	var firstID string
	for _, e := range events {
		kinds = append(kinds, e.event)
		if e.event == "output" {
			outputs = append(outputs, decode[OutputEvent](t, []byte(e.data)))
			if firstID == "" {
				firstID = e.id
			}
		}
	}
	require.Equal(t, "status", kinds[0])
	require.Equal(t, "result", kinds[len(kinds)-1])
	require.Len(t, outputs, 2)
	require.Equal(t, "one\n", outputs[0].Data)
	require.Equal(t, jobs.EncodingBase64, outputs[1].Encoding, "bytes that are not UTF-8 travel as base64")
	require.Equal(t, int64(4), outputs[1].Offset)
	result := decode[JobView](t, []byte(events[len(events)-1].data))
	require.Equal(t, "live", result.ID)
	require.Equal(t, jobs.StatusSucceeded, result.Status)

	// Resume after the first output: only the second comes again.
	require.NotEmpty(t, firstID)
	events = readSSE(t, b.http.URL+"/v1/jobs/live/events", key, firstID)
	outputs = nil
	for _, e := range events {
		if e.event == "output" {
			outputs = append(outputs, decode[OutputEvent](t, []byte(e.data)))
		}
	}
	require.Len(t, outputs, 1)
	require.Equal(t, int64(4), outputs[0].Offset)
}

func TestBatches(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	batch := []map[string]any{
		{"id": "b-0", "lang": "python", "code": "print(0)"},
		{"lang": "cobol", "code": "x"},
		{"id": "b-2", "lang": "python", "code": "print(2)"},
	}
	resp, body := b.do("POST", "/v1/batches?id=nightly", key, batch)
	require.Equal(t, 201, resp.StatusCode, string(body))
	created := decode[BatchCreated](t, body)
	require.Equal(t, BatchCreated{ID: "nightly", Total: 3, Enqueued: 2, Items: []BatchItem{
		{Index: 0, ID: "b-0", Status: jobs.StatusQueued},
		{Index: 1, Error: created.Items[1].Error},
		{Index: 2, ID: "b-2", Status: jobs.StatusQueued},
	}}, created)
	require.Equal(t, 422, created.Items[1].Error.Status)
	require.Equal(t, "body[1].lang", created.Items[1].Error.Errors[0].Location)
	resp, _ = b.do("POST", "/v1/batches?id=nightly", key, batch)
	require.Equal(t, 409, resp.StatusCode, "a batch ID is taken once")

	// NDJSON too.
	resp, body = b.do("POST", "/v1/batches", key, "{\"lang\":\"python\",\"code\":\"x\"}\n\n{\"lang\":\"python\",\"code\":\"y\"}\n",
		"Content-Type", "application/x-ndjson")
	require.Equal(t, 201, resp.StatusCode, string(body))
	require.Equal(t, 2, decode[BatchCreated](t, body).Enqueued)
	resp, body = b.do("POST", "/v1/batches", key, "{\"lang\":\"python\",\"code\":\"z\"}\n", "Content-Type", "application/json")
	require.Equal(t, 201, resp.StatusCode, "NDJSON sent as JSON (curl --data-binary): %s", body)
	resp, _ = b.do("POST", "/v1/batches", key, "not json")
	require.Equal(t, 400, resp.StatusCode)
	// curl -d's form type: the body is JSON all the same.
	resp, body = b.do("POST", "/v1/jobs", key, `{"lang":"python","code":"x"}`, "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, 202, resp.StatusCode, string(body))

	resp, body = b.do("GET", "/v1/batches/nightly", key, nil)
	require.Equal(t, 200, resp.StatusCode)
	p := decode[BatchProgress](t, body)
	require.Equal(t, 2, p.Total)
	require.Equal(t, 0, p.Done)
	require.Equal(t, 2, p.Counts[jobs.StatusQueued])

	// Results stream as the jobs finish.
	b.finish("acme", "b-2", jobs.StatusSucceeded, "2\n")
	lines := make(chan []string, 1)
	go func() {
		req, _ := http.NewRequest("GET", b.http.URL+"/v1/batches/nightly/results", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			lines <- nil
			return
		}
		defer resp.Body.Close()
		var out []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			out = append(out, sc.Text())
		}
		lines <- out
	}()
	time.Sleep(300 * time.Millisecond)
	b.finish("acme", "b-0", jobs.StatusFailed, "")
	got := <-lines
	require.Len(t, got, 2)
	require.Equal(t, "b-2", decode[JobView](t, []byte(got[0])).ID, "the job already final first")
	require.Equal(t, jobs.StatusFailed, decode[JobView](t, []byte(got[1])).Status)
	resp, body = b.do("GET", "/v1/batches/nightly", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	p = decode[BatchProgress](t, body)
	require.Equal(t, 2, p.Done)

	other := b.key("other", service.KeyOptions{})
	resp, _ = b.do("GET", "/v1/batches/nightly", other, nil)
	require.Equal(t, 404, resp.StatusCode, "another tenant's batch")
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	fails := 1
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got, bodies = append(got, r), append(bodies, body)
		if fails > 0 {
			fails--
			w.WriteHeader(http.StatusBadGateway) // the first attempt fails: retried
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	resp, body := b.do("POST", "/v1/jobs", key, map[string]any{"id": "hooked", "lang": "python", "code": "x", "callback_url": receiver.URL + "/done"})
	require.Equal(t, 202, resp.StatusCode, string(body))
	require.Equal(t, "pending", decode[JobView](t, body).Webhook.State)
	b.finish("acme", "hooked", jobs.StatusSucceeded, "out\n")

	var view JobView
	require.Eventually(t, func() bool {
		_, body := b.do("GET", "/v1/jobs/hooked", key, nil)
		view = decode[JobView](t, body)
		return view.Webhook != nil && view.Webhook.State == "delivered"
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, 2, view.Webhook.Attempts, "one failed attempt, then the delivery")
	require.Equal(t, 204, view.Webhook.LastStatusCode)

	_, body = b.do("GET", "/v1/webhook-secret", key, nil)
	secret := decode[WebhookSecret](t, body).Secret
	require.True(t, strings.HasPrefix(secret, "whsec_"))
	mu.Lock()
	defer mu.Unlock()
	last := got[len(got)-1]
	require.Equal(t, "job.finished", last.Header.Get("Sandq-Event"))
	sig := last.Header.Get("Sandq-Signature")
	var ts, v1 string
	for part := range strings.SplitSeq(sig, ",") {
		k, v, _ := strings.Cut(part, "=")
		if k == "t" {
			ts = v
		} else if k == "v1" {
			v1 = v
		}
	}
	require.Equal(t, service.Sign(secret, ts, bodies[len(bodies)-1]), v1, "signed with the key's secret over t.body")
	require.NotEqual(t, service.Sign("whsec_wrong", ts, bodies[len(bodies)-1]), v1)
	delivered := decode[JobView](t, bodies[len(bodies)-1])
	require.Equal(t, "hooked", delivered.ID)
	require.Equal(t, "out\n", delivered.Stdout)
}

func TestOpenModeAndMisc(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.Open = true })
	resp, body := b.do("POST", "/v1/jobs", "", map[string]any{"id": "plain", "lang": "python", "code": "x"})
	require.Equal(t, 202, resp.StatusCode, string(body))
	_, err := b.client.Get(context.Background(), "plain")
	require.NoError(t, err, "without keys, IDs are stored as given")
	resp, body = b.do("GET", "/v1/languages", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, string(body), `"name":"python"`)
	resp, body = b.do("GET", "/healthz", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "ok\n", string(body))
	resp, body = b.do("GET", "/metrics", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, string(body), `sandq_api_request_seconds_count{code="202",operation="create-job"} 1`)
}

// An API started open stops serving requests without a key once a key is
// made, within a second, and authenticates a request that carries one all
// along.
func TestOpenModeClosesWhenAKeyExists(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.Open = true })
	resp, body := b.do("GET", "/v1/languages", "", nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	resp, _ = b.do("GET", "/v1/languages", "sqk_nope_nope", nil)
	require.Equal(t, 401, resp.StatusCode, "a key given is checked, even while open")

	key := b.key("t1", service.KeyOptions{})
	resp, body = b.do("POST", "/v1/jobs", key, map[string]any{"id": "mine", "lang": "python", "code": "x"})
	require.Equal(t, 202, resp.StatusCode, string(body))
	_, err := b.client.Get(context.Background(), service.StoredID("t1", "mine"))
	require.NoError(t, err, "a keyed request is the key's tenant's, open or not")
	require.Eventually(t, func() bool {
		resp, _ := b.do("GET", "/v1/languages", "", nil)
		return resp.StatusCode == 401
	}, 3*time.Second, 50*time.Millisecond, "requests without a key refused once a key exists")
	require.NoError(t, b.keys.Revoke(context.Background(), strings.SplitN(key, "_", 3)[1]))
	time.Sleep(1100 * time.Millisecond)
	resp, _ = b.do("GET", "/v1/languages", "", nil)
	require.Equal(t, 401, resp.StatusCode, "revoking every key does not reopen the API")
}
