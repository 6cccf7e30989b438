package api

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// uiDo sends a dashboard request with the login cookie key (none when
// empty) and the given headers, following no redirect.
func (b *apiBundle) uiDo(method, path, key string, form url.Values, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.http.URL+path, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Accept", "text/html")
	if key != "" {
		req.AddCookie(&http.Cookie{Name: uiCookie, Value: key})
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
	return resp, string(data)
}

// submit enqueues a job of key's through the API (no worker runs it).
func (b *apiBundle) submit(key, id string) {
	b.t.Helper()
	resp, body := b.do("POST", "/v1/jobs", key, map[string]any{"id": id, "lang": "python", "code": "print(1)"})
	require.Equal(b.t, http.StatusAccepted, resp.StatusCode, string(body))
}

// finishAs stores a final Result of tenant's job id with stdout, as a
// worker would.
func (b *apiBundle) finishAs(tenant, id, stdout string) {
	b.t.Helper()
	code := 0
	r := jobs.Result{ID: service.StoredID(tenant, id), Tenant: tenant, Status: jobs.StatusSucceeded, ExitCode: &code, Attempts: 1,
		Lang: "python", EnqueuedAt: time.Now().UTC().Add(-time.Second), StartedAt: time.Now().UTC().Add(-time.Second / 2), FinishedAt: time.Now().UTC()}
	r.SetStdout([]byte(stdout))
	_, err := b.client.Store().PutFinal(context.Background(), r)
	require.NoError(b.t, err)
}

func TestDashboard(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apiBundle
		acme, beta, operator string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{apiBundle: newAPI(t, nil)}
		b.acme = b.key("acme", service.KeyOptions{})
		b.beta = b.key("beta", service.KeyOptions{})
		b.operator = b.key("ops", service.KeyOptions{Scopes: []string{service.ScopeRead, service.ScopeTenants}})
		return b
	}
	origin := func(b *testBundle) []string { return []string{"Origin", b.http.URL} }

	t.Run("LoginSetsAStrictHttpOnlyCookie", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		resp, _ := b.uiDo("GET", "/ui/jobs?status=queued", "", nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/login?next="+url.QueryEscape("/ui/jobs?status=queued"), resp.Header.Get("Location"))

		resp, page := b.uiDo("GET", "/ui/login", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `name="key"`)

		resp, page = b.uiDo("POST", "/ui/login", "", url.Values{"key": {"sqk_nope_nope"}}, origin(b)...)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Contains(t, page, "unknown or revoked API key")
		require.Empty(t, resp.Cookies())

		resp, _ = b.uiDo("POST", "/ui/login", "", url.Values{"key": {b.acme}, "next": {"/ui/batches"}}, origin(b)...)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/batches", resp.Header.Get("Location"))
		cookies := resp.Cookies()
		require.Len(t, cookies, 1)
		ck := cookies[0]
		require.Equal(t, uiCookie, ck.Name)
		require.Equal(t, b.acme, ck.Value)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		require.Equal(t, "/ui", ck.Path)
		require.False(t, ck.Secure, "plain HTTP here; Secure over TLS")

		// A next that leaves the dashboard is not followed.
		resp, _ = b.uiDo("POST", "/ui/login", "", url.Values{"key": {b.acme}, "next": {"//evil.example/x"}}, origin(b)...)
		require.Equal(t, "/ui/jobs", resp.Header.Get("Location"))

		resp, page = b.uiDo("GET", "/ui/jobs", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "tenant acme")

		// A revoked key's cookie is cleared and sent to the login.
		resp, _ = b.uiDo("GET", "/ui/jobs", "sqk_gone_gone", nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Set-Cookie"), "Max-Age=0")
	})

	t.Run("CSRFRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tt := range []struct {
			name string
			hdr  []string
		}{
			{"NoOriginNoFetchMetadata", nil},
			{"CrossOrigin", []string{"Origin", "https://evil.example"}},
			{"NullOrigin", []string{"Origin", "null"}},
			{"CrossSite", []string{"Sec-Fetch-Site", "cross-site", "Origin", b.http.URL}},
			{"SameSiteSubdomain", []string{"Sec-Fetch-Site", "same-site"}},
		} {
			resp, page := b.uiDo("POST", "/ui/login", "", url.Values{"key": {b.acme}}, tt.hdr...)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, tt.name)
			require.Empty(t, resp.Cookies(), tt.name)
			require.Contains(t, page, "did not come from the dashboard", tt.name)
			resp, _ = b.uiDo("POST", "/ui/logout", b.acme, url.Values{}, tt.hdr...)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, tt.name)
			require.Empty(t, resp.Cookies(), "a forged logout clears nothing: "+tt.name)
		}
		resp, _ := b.uiDo("POST", "/ui/login", "", url.Values{"key": {b.acme}}, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		resp, _ = b.uiDo("POST", "/ui/logout", b.acme, url.Values{}, origin(b)...)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Set-Cookie"), "Max-Age=0")
	})

	t.Run("TenantIsolation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(b.acme, "acme-job")
		b.submit(b.beta, "beta-job")
		b.finishAs("beta", "beta-job", "beta's secret output")
		resp, body := b.do("POST", "/v1/batches?id=acme-batch", b.acme, []map[string]any{{"id": "acme-b1", "lang": "python", "code": "x"}})
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		resp, body = b.do("POST", "/v1/batches?id=beta-batch", b.beta, []map[string]any{{"id": "beta-b1", "lang": "python", "code": "x"}})
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))

		// A tenant sees its own jobs and batches only.
		resp, page := b.uiDo("GET", "/ui/jobs", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `href="/ui/jobs/acme-job"`)
		require.Contains(t, page, `href="/ui/jobs/acme-b1"`)
		require.NotContains(t, page, "beta-job")
		require.NotContains(t, page, "beta-b1")
		resp, page = b.uiDo("GET", "/ui/batches", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "acme-batch")
		require.NotContains(t, page, "beta-batch")

		// Naming another tenant's job or batch reads its own namespace.
		resp, page = b.uiDo("GET", "/ui/jobs/beta-job", b.acme, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.NotContains(t, page, "secret")
		resp, _ = b.uiDo("GET", "/ui/jobs/"+service.StoredID("beta", "beta-job"), b.acme, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		resp, _ = b.uiDo("GET", "/ui/batches/beta-batch", b.acme, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		resp, _ = b.uiDo("GET", "/ui/jobs?batch=beta-batch", b.acme, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		resp, _ = b.uiDo("GET", "/ui/jobs/beta-job/events", b.acme, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		// Or asking for another tenant: refused.
		resp, _ = b.uiDo("GET", "/ui/jobs?tenant=beta", b.acme, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		resp, _ = b.uiDo("GET", "/ui/sessions?tenant=beta", b.acme, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)

		// The workers and the queues are the operator's.
		resp, _ = b.uiDo("GET", "/ui/workers", b.acme, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		for _, p := range []string{"/ui/queues", "/ui/queues/", "/ui/queues/api/queues"} {
			resp, page = b.uiDo("GET", p, b.acme, nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, p)
			require.Contains(t, page, service.ScopeTenants, p)
		}

		// The operator sees every tenant, by stored IDs.
		resp, page = b.uiDo("GET", "/ui/jobs", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		betaStored := service.StoredID("beta", "beta-job")
		require.Contains(t, page, `href="/ui/jobs/`+betaStored+`"`)
		require.Contains(t, page, service.StoredID("acme", "acme-job"))
		resp, page = b.uiDo("GET", "/ui/jobs?tenant=beta", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, betaStored)
		require.NotContains(t, page, "acme-job")
		resp, page = b.uiDo("GET", "/ui/jobs?status=succeeded", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, betaStored)
		require.NotContains(t, page, "acme-job")
		resp, page = b.uiDo("GET", "/ui/jobs/"+betaStored, b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "beta&#39;s secret output")
		resp, page = b.uiDo("GET", "/ui/batches", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, service.StoredID("beta", "beta-batch"))
		require.Contains(t, page, service.StoredID("acme", "acme-batch"))
		resp, page = b.uiDo("GET", "/ui/batches/"+service.StoredID("beta", "beta-batch"), b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `<span id="total">1</span>`)
		st := b.client.Store()
		owner := "ui-worker-" + jobs.NewID()[:8]
		require.NoError(t, st.SetFleetSlots(context.Background(), owner, 2))
		t.Cleanup(func() { _ = st.OwnerGone(context.Background(), owner) })
		require.NoError(t, st.PublishWorkerStatus(context.Background(), owner, store.WorkerStatus{At: time.Now(), Containers: 2,
			Pools:   []store.PoolStatus{{Pool: "sandq/python:latest", Idle: 1, Busy: 1, Warm: true}},
			Latency: []store.LatencyStatus{store.Latency("python", []int64{4, 30, 700})}}, time.Minute))
		resp, page = b.uiDo("GET", "/ui/workers", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `id="queues"`)
		require.Contains(t, page, "<code>sandq/python:latest</code> (kept warm)</td><td class=\"n\">1</td><td class=\"n\">1</td>", "the worker's pool, 1 idle and 1 busy")
		require.Contains(t, page, "<th>python</th><td class=\"n\">3</td><td class=\"n\">30 ms</td><td class=\"n\">30 ms</td><td class=\"n\">1</td>", "its latency: 3 jobs, p50 and p99, one at most 5 ms")
		require.Contains(t, page, "<th>≤ 1 s</th>")
		resp, page = b.uiDo("GET", "/ui/queues/", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		require.Contains(t, page, "/ui/queues", "asynqmon's page, rooted at /ui/queues")
		resp, page = b.uiDo("GET", "/ui/queues/api/queues", b.operator, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
	})

	t.Run("OutputEscaped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.submit(b.acme, "xss")
		b.finishAs("acme", "xss", `<script>alert("pwned")</script><img src=x onerror=alert(1)>`)
		resp, page := b.uiDo("GET", "/ui/jobs/xss", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;`)
		require.NotContains(t, page, "<script>alert")
		require.NotContains(t, page, "<img src=x")
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	})

	t.Run("BatchPageAndEvents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		batch := []map[string]any{{"id": "z", "lang": "python", "code": "x"}, {"id": "a", "lang": "python", "code": "x"}, {"id": "m", "lang": "python", "code": "x"}}
		resp, body := b.do("POST", "/v1/batches?id=nightly", b.acme, batch)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		b.finishAs("acme", "a", "done")
		resp, page := b.uiDo("GET", "/ui/batches/nightly", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `<span id="done">1</span> of <span id="total">3</span>`)
		require.Contains(t, page, `<td class="n" data-status="queued">2</td>`)
		require.Contains(t, page, `<td class="n" data-status="succeeded">1</td>`)
		require.Contains(t, page, `http-equiv="refresh"`, "refreshed until done")
		iz, ia, im := strings.Index(page, `href="/ui/jobs/z"`), strings.Index(page, `href="/ui/jobs/a"`), strings.Index(page, `href="/ui/jobs/m"`)
		require.True(t, iz > 0 && iz < ia && ia < im, "the batch's jobs in its order")
		resp, page = b.uiDo("GET", "/ui/jobs?batch=nightly&status=queued", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `href="/ui/jobs/z"`)
		require.NotContains(t, page, `href="/ui/jobs/a"`)

		// A queued job's page follows it; an ended job's events end at once.
		resp, page = b.uiDo("GET", "/ui/jobs/z", b.acme, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `data-events="/ui/jobs/z/events"`)
		resp, page = b.uiDo("GET", "/ui/jobs/a/events", b.acme, nil, "Accept", "text/event-stream")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		require.Contains(t, page, "event: output\ndata: {\"stream\":\"stdout\",\"step\":\"run\",\"data\":\"done\"}")
		require.True(t, strings.HasSuffix(page, "event: end\ndata: {\"status\":\"succeeded\"}\n\n"), page)
		resp, _ = b.uiDo("GET", "/ui/jobs/a/events", "", nil, "Accept", "text/event-stream")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an EventSource without a login is refused, not redirected")
	})

	t.Run("OpenAPIServesAnonymously", func(t *testing.T) {
		t.Parallel()
		b := newAPI(t, func(c *Config) { c.Open = true })
		resp, body := b.do("POST", "/v1/jobs", "", map[string]any{"id": "anon-job", "lang": "python", "code": "print(1)"})
		require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
		resp, page := b.uiDo("GET", "/ui/jobs", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "anon-job")
		require.Contains(t, page, "open API")
		resp, page = b.uiDo("GET", "/ui/jobs?tenant=@", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "anon-job", "@ names the anonymous tenant")
		resp, _ = b.uiDo("GET", "/ui/workers", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})
}
