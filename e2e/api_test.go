package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandq/sandq/service"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/api"
	"github.com/sandq/sandq/jobs"
)

// apiProc is a running `api` process for an env.
type apiProc struct {
	url string
	cmd *exec.Cmd
	log *bytes.Buffer
}

// apiArgs are the flags every API process of e gets.
func (e *env) apiArgs() []string {
	return append(e.redisFlags(), "--prefix", e.prefix, "--queue-prefix", e.queuePrefix)
}

// startAPI starts the API for e's namespace and waits until it serves.
func (e *env) startAPI(args ...string) *apiProc {
	e.t.Helper()
	addr := freeAddr(e.t)
	p := &apiProc{url: "http://" + addr, log: &bytes.Buffer{}}
	p.cmd = exec.Command(bins.api, append(append(e.apiArgs(), "--addr", addr), args...)...)
	p.cmd.Stderr = &syncWriter{w: p.log}
	require.NoError(e.t, p.cmd.Start())
	e.t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		err := p.cmd.Wait()
		checkProcess(e.t, "the API", err, []os.Signal{syscall.SIGTERM}, p.log.String())
		if e.t.Failed() {
			e.t.Logf("api log:\n%s", p.log)
		}
	})
	require.Eventually(e.t, func() bool {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}, 30*time.Second, 20*time.Millisecond, "the API did not start")
	return p
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// apiKey makes a key with `api keys create` and returns it: the one line
// of stdout.
func (e *env) apiKey(tenant string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command(bins.api, append(append([]string{"keys", "create", "--tenant", tenant}, args...), e.apiArgs()...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(e.t, err, stderr.String())
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(e.t, lines, 1, "the key alone on its line")
	require.True(e.t, strings.HasPrefix(lines[0], "sqk_"))
	return lines[0]
}

// call sends a request to the API and decodes a JSON answer into out
// (when not nil); it returns the response, body read.
func call(t testing.TB, method, url, key string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(data) > 0 && strings.Contains(resp.Header.Get("Content-Type"), "json") {
		require.NoError(t, json.Unmarshal(data, out), string(data))
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp
}

// TestAPI drives the HTTP API end to end: a real worker (artifacts in
// MinIO), the api binary, keys made with its CLI. Jobs run for real:
// long-poll, events with live output, artifacts through the API,
// cancel, tenants, a signed webhook, and a thousand concurrent long-polls
// held on a bounded number of Redis connections.
func TestAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s3Worker("--concurrency", "2")
	a := e.startAPI("--webhook-allow-hosts", "127.0.0.1", "--max-job-bytes", "200000")
	keyA, keyB := e.apiKey("tenant-a"), e.apiKey("tenant-b")

	t.Run("RunAndWait", func(t *testing.T) {
		var v api.JobView
		resp := call(t, "POST", a.url+"/v1/jobs?wait=60s", keyA, map[string]any{"id": "hello", "lang": "python", "code": "import sys\nprint('hi', sys.argv[1:])", "args": []string{"x"}}, &v)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "hello", v.ID)
		require.Equal(t, jobs.StatusSucceeded, v.Status)
		require.Equal(t, "hi ['x']\n", v.Stdout)
		// B sees none of it.
		resp = call(t, "GET", a.url+"/v1/jobs/hello", keyB, nil, nil)
		require.Equal(t, 404, resp.StatusCode)
		resp = call(t, "POST", a.url+"/v1/jobs", "", map[string]any{"lang": "python", "code": "x"}, nil)
		require.Equal(t, 401, resp.StatusCode)
		resp = call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"lang": "python", "code": strings.Repeat("#", 300_000)}, nil)
		require.Equal(t, 413, resp.StatusCode)
	})

	t.Run("EventsFollowALiveJob", func(t *testing.T) {
		var v api.JobView
		resp := call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"id": "live", "lang": "python", "stream": true,
			"code": "import time\nfor i in range(5):\n    print('tick', i, flush=True)\n    time.sleep(0.2)"}, &v)
		require.Equal(t, 202, resp.StatusCode)
		req, err := http.NewRequest("GET", a.url+"/v1/jobs/live/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+keyA)
		r, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer r.Body.Close()
		var events []string
		var out strings.Builder
		sawRunningBeforeOutput := false
		sc := bufio.NewScanner(r.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				event = v
				events = append(events, v)
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				switch event {
				case "status":
					if strings.Contains(d, "running") && !strings.Contains(out.String(), "tick") {
						sawRunningBeforeOutput = true
					}
				case "output":
					var o api.OutputEvent
					require.NoError(t, json.Unmarshal([]byte(d), &o))
					out.WriteString(o.Data)
				case "result":
					require.NoError(t, json.Unmarshal([]byte(d), &v))
				}
			}
			if event == "result" && line == "" {
				break
			}
		}
		require.Equal(t, "status", events[0])
		require.Equal(t, "result", events[len(events)-1])
		require.True(t, sawRunningBeforeOutput, "a running status event: %v", events)
		require.Equal(t, "tick 0\ntick 1\ntick 2\ntick 3\ntick 4\n", out.String())
		require.Equal(t, jobs.StatusSucceeded, v.Status)
	})

	t.Run("Artifacts", func(t *testing.T) {
		var v api.JobView
		resp := call(t, "POST", a.url+"/v1/jobs?wait=60s", keyA, map[string]any{"id": "files", "lang": "python",
			"code":         "open('out.html','w').write('<script>alert(1)</script>')\nopen('data.csv','w').write('a,b\\n1,2\\n')",
			"output_files": []string{"*.html", "*.csv"}}, &v)
		require.Equal(t, 200, resp.StatusCode)
		require.Len(t, v.Artifacts, 2)
		var list struct {
			Artifacts []api.ArtifactView `json:"artifacts"`
		}
		require.Equal(t, 200, call(t, "GET", a.url+"/v1/jobs/files/artifacts", keyA, nil, &list).StatusCode)
		require.Len(t, list.Artifacts, 2)
		for _, art := range list.Artifacts {
			resp := call(t, "GET", a.url+art.URL, keyA, nil, nil)
			require.Equal(t, 307, resp.StatusCode, "a redirect to the store")
			loc := resp.Header.Get("Location")
			got, err := http.Get(loc)
			require.NoError(t, err)
			body, _ := io.ReadAll(got.Body)
			got.Body.Close()
			switch art.Name {
			case "data.csv":
				require.Equal(t, "a,b\n1,2\n", string(body))
			case "out.html":
				require.Contains(t, got.Header.Get("Content-Disposition"), "attachment", "HTML is a download")
			}
		}
		require.Equal(t, 404, call(t, "GET", a.url+list.Artifacts[0].URL, keyB, nil, nil).StatusCode)
	})

	t.Run("CancelARunningJob", func(t *testing.T) {
		resp := call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"id": "sleeper", "lang": "python", "code": "import time\nprint('up', flush=True)\ntime.sleep(60)", "limits": map[string]any{"timeout_ms": 120000}}, nil)
		require.Equal(t, 202, resp.StatusCode)
		e.waitRunning(service.StoredID("tenant-a", "sleeper"), time.Minute)
		require.Equal(t, 404, call(t, "POST", a.url+"/v1/jobs/sleeper/cancel", keyB, nil, nil).StatusCode, "B cannot cancel A's job")
		require.Equal(t, 202, call(t, "POST", a.url+"/v1/jobs/sleeper/cancel", keyA, nil, nil).StatusCode)
		var v api.JobView
		call(t, "GET", a.url+"/v1/jobs/sleeper?wait=60s", keyA, nil, &v)
		require.Equal(t, jobs.StatusCanceled, v.Status)
		require.Equal(t, 409, call(t, "POST", a.url+"/v1/jobs/sleeper/cancel", keyA, nil, nil).StatusCode)
	})

	t.Run("SignedWebhook", func(t *testing.T) {
		var secret api.WebhookSecret
		call(t, "GET", a.url+"/v1/webhook-secret", keyA, nil, &secret)
		got := make(chan *http.Request, 1)
		bodies := make(chan []byte, 1)
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- r
			bodies <- b
		}))
		defer receiver.Close()
		resp := call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"id": "hooked", "lang": "python", "code": "print(42)", "callback_url": receiver.URL}, nil)
		require.Equal(t, 202, resp.StatusCode)
		var r *http.Request
		select {
		case r = <-got:
		case <-time.After(time.Minute):
			t.Fatal("no webhook")
		}
		body := <-bodies
		ts, v1, _ := strings.Cut(strings.TrimPrefix(r.Header.Get("Sandq-Signature"), "t="), ",v1=")
		require.Equal(t, service.Sign(secret.Secret, ts, body), v1, "a valid signature")
		var v api.JobView
		require.NoError(t, json.Unmarshal(body, &v))
		require.Equal(t, "hooked", v.ID)
		require.Equal(t, "42\n", v.Stdout)
		// A private target is refused at enqueue.
		resp = call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"lang": "python", "code": "x", "callback_url": "http://192.168.1.10/hook"}, nil)
		require.Equal(t, 422, resp.StatusCode)
	})

	t.Run("ScopesSquatsRatesAndMeta", func(t *testing.T) {
		reader := e.apiKey("tenant-a", "--scope", "jobs:read")
		require.Equal(t, 403, call(t, "POST", a.url+"/v1/jobs", reader, map[string]any{"lang": "python", "code": "x"}, nil).StatusCode)
		require.Equal(t, 200, call(t, "GET", a.url+"/v1/jobs/hello", reader, nil, nil).StatusCode, "the read scope reads")
		// B takes the ID "hello" for itself: its own job, A's untouched.
		var vb, va api.JobView
		require.Equal(t, 200, call(t, "POST", a.url+"/v1/jobs?wait=60s", keyB, map[string]any{"id": "hello", "lang": "python", "code": "print('b')"}, &vb).StatusCode)
		require.Equal(t, "b\n", vb.Stdout)
		call(t, "GET", a.url+"/v1/jobs/hello", keyA, nil, &va)
		require.Equal(t, "hi ['x']\n", va.Stdout, "A's result is not replaced")
		require.Equal(t, 409, call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"id": "hello", "lang": "python", "code": "print('again')"}, nil).StatusCode)
		// A key's rate: 3 a second.
		slow := e.apiKey("tenant-c", "--rate", "3")
		// Ten at once: one after another, on a loaded machine, they could
		// come slower than three a second.
		codes := map[int]int{}
		noRetryAfter := 0
		var mu sync.Mutex
		var calls sync.WaitGroup
		for range 10 {
			calls.Go(func() {
				resp := call(t, "GET", a.url+"/v1/languages", slow, nil, nil)
				mu.Lock()
				defer mu.Unlock()
				codes[resp.StatusCode]++
				if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
					noRetryAfter++
				}
			})
		}
		calls.Wait()
		require.Zero(t, noRetryAfter, "every 429 says when to retry")
		require.Positive(t, codes[429], "past the rate: %v", codes)
		require.Positive(t, codes[200], "%v", codes)
		// The meta endpoints.
		var langs []map[string]any
		require.Equal(t, 200, call(t, "GET", a.url+"/v1/languages", keyA, nil, &langs).StatusCode)
		require.Len(t, langs, 11)
		var doc map[string]any
		require.Equal(t, 200, call(t, "GET", a.url+"/openapi.json", "", nil, &doc).StatusCode)
		require.Equal(t, "3.1.0", doc["openapi"])
		resp := call(t, "GET", a.url+"/docs", "", nil, nil)
		require.Equal(t, 200, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
		require.Equal(t, 401, call(t, "GET", a.url+"/metrics", "", nil, nil).StatusCode, "every tenant's usage is on /metrics: a key is needed")
		require.Equal(t, 403, call(t, "GET", a.url+"/metrics", keyA, nil, nil).StatusCode, "a tenant's key lacks the metrics scope")
		resp = call(t, "GET", a.url+"/metrics", e.apiKey("ops", "--scope", "metrics:read"), nil, nil)
		body, _ := io.ReadAll(resp.Body)
		require.Contains(t, string(body), `sandq_api_request_seconds_count{code="403",operation="create-job"}`)
	})

	t.Run("EventsResume", func(t *testing.T) {
		// The finished job "live": its whole stream, then again from the
		// second output event's ID.
		read := func(lastID string) (ids, kinds []string) {
			req, err := http.NewRequest("GET", a.url+"/v1/jobs/live/events", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+keyA)
			if lastID != "" {
				req.Header.Set("Last-Event-ID", lastID)
			}
			r, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer r.Body.Close()
			require.Equal(t, 200, r.StatusCode)
			sc := bufio.NewScanner(r.Body)
			kind, id := "", ""
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "event: "); ok {
					kind = v
				}
				if v, ok := strings.CutPrefix(line, "id: "); ok {
					id = v
				}
				if line == "" && kind != "" {
					kinds, ids = append(kinds, kind), append(ids, id)
					if kind == "result" {
						return
					}
					kind, id = "", ""
				}
			}
			return
		}
		ids, kinds := read("")
		var outputs []string
		for i, k := range kinds {
			if k == "output" {
				outputs = append(outputs, ids[i])
			}
		}
		require.GreaterOrEqual(t, len(outputs), 3, "%v", kinds)
		ids2, kinds2 := read(outputs[1])
		var outputs2 []string
		for i, k := range kinds2 {
			if k == "output" {
				outputs2 = append(outputs2, ids2[i])
			}
		}
		require.Equal(t, outputs[2:], outputs2, "resumed after the event named")
		require.Equal(t, "result", kinds2[len(kinds2)-1])
	})

	t.Run("WebhookOutcomeOnTheJob", func(t *testing.T) {
		var v api.JobView
		require.Eventually(t, func() bool {
			call(t, "GET", a.url+"/v1/jobs/hooked", keyA, nil, &v)
			return v.Webhook != nil && v.Webhook.State == "delivered"
		}, 10*time.Second, 50*time.Millisecond)
		require.Equal(t, 1, v.Webhook.Attempts)
		require.Equal(t, 200, v.Webhook.LastStatusCode)
	})

	t.Run("TwoAPIProcessesShareOnlyRedis", func(t *testing.T) {
		b := e.startAPI()
		require.Equal(t, 202, call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"id": "across", "lang": "python", "code": "import time\ntime.sleep(1)\nprint('x')"}, nil).StatusCode)
		var v api.JobView
		require.Equal(t, 200, call(t, "GET", b.url+"/v1/jobs/across?wait=60s", keyA, nil, &v).StatusCode)
		require.Equal(t, "x\n", v.Stdout)
		require.Equal(t, 404, call(t, "GET", b.url+"/v1/jobs/across", keyB, nil, nil).StatusCode)
	})

	t.Run("ThousandLongPolls", func(t *testing.T) {
		_, streamsBefore := apiRedisConns(t, e.rdb, a.cmd.Process.Pid)
		// The job runs until the test cancels it, once all 1,000 polls
		// are held: it cannot end while they are still arriving (on a
		// loaded machine 1,000 requests can take longer than any sleep).
		resp := call(t, "POST", a.url+"/v1/jobs", keyA, map[string]any{"id": "slow", "lang": "python", "code": "import time\ntime.sleep(280)", "limits": map[string]any{"timeout_ms": 300000}}, nil)
		require.Equal(t, 202, resp.StatusCode)
		// A key of tenant A whose rate allows the burst (the default is 100/s).
		burst := e.apiKey("tenant-a", "--rate", "5000")
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1100, MaxConnsPerHost: 0}}
		var codes sync.Map
		var ok, wrong atomic.Int64
		var wg sync.WaitGroup
		for range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", a.url+"/v1/jobs/slow?wait=60s", nil)
				req.Header.Set("Authorization", "Bearer "+burst)
				resp, err := client.Do(req)
				if err != nil {
					wrong.Add(1)
					return
				}
				defer resp.Body.Close()
				var v api.JobView
				if resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&v) == nil && v.Status == jobs.StatusCanceled {
					ok.Add(1)
				} else {
					wrong.Add(1)
					codes.Store(resp.StatusCode, true)
				}
			}()
		}
		// Once they are all held: count the API's Redis connections.
		scraper := e.apiKey("ops", "--scope", "metrics:read")
		require.Eventually(t, func() bool {
			req, _ := http.NewRequest("GET", a.url+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+scraper)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(b), "sandq_api_waiting 1000")
		}, time.Minute, 50*time.Millisecond, "1,000 requests waiting (%d answered wrongly)", wrong.Load())
		conns, streams := apiRedisConns(t, e.rdb, a.cmd.Process.Pid)
		t.Logf("1,000 long-polls held on %d Redis connections of the API (%d of its stream pool, %d before)", conns, streams, streamsBefore)
		// The API's client never holds more than go-redis's pools allow,
		// whatever the number of requests: PoolSize (10 per CPU), the
		// pipeline pool (10) and the one subscription the long-polls share.
		// The stream pool serves SSE only: a long-poll takes none of it.
		require.LessOrEqual(t, conns, 10*runtime.GOMAXPROCS(0)+10+1, "a bounded number of connections")
		require.LessOrEqual(t, streams, streamsBefore, "long-polls take no stream connection")
		require.Zero(t, ok.Load()+wrong.Load(), "no poll answered while the job runs")
		// Its end answers every one of them.
		require.Equal(t, 202, call(t, "POST", a.url+"/v1/jobs/slow/cancel", keyA, nil, nil).StatusCode)
		wg.Wait()
		var seen []int
		codes.Range(func(k, _ any) bool { seen = append(seen, k.(int)); return true })
		require.Equal(t, int64(1000), ok.Load(), "wrong: %d (codes %v)", wrong.Load(), seen)
	})
}

// apiRedisConns counts one API process's Redis connections by client
// name: its main client's and its event streams' pool's.
func apiRedisConns(t *testing.T, rdb redis.UniversalClient, pid int) (api, streams int) {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	return strings.Count(list, fmt.Sprintf("name=sandq-api:%d ", pid)), strings.Count(list, fmt.Sprintf("name=sandq-api-streams:%d ", pid))
}

// TestAPILocalArtifacts: with the local store, the API serves the files
// itself (HTML as a download, nosniff), only from the store's directory.
func TestAPILocalArtifacts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.startWorker("--artifact-dir", dir, "--artifact-prefix", e.prefix)
	a := e.startAPI("--artifact-dir", dir)
	key := e.apiKey("acme")
	var v api.JobView
	resp := call(t, "POST", a.url+"/v1/jobs?wait=60s", key, map[string]any{"lang": "python",
		"code": "open('page.html','w').write('<b>x</b>')", "output_files": []string{"page.html"}}, &v)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, v.Artifacts, 1)
	resp = call(t, "GET", a.url+v.Artifacts[0].URL, key, nil, nil)
	require.Equal(t, 200, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, "<b>x</b>", string(body))
	require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.NoFileExists(t, filepath.Join(dir, "page.html"), "sanity: the store nests files by prefix and job")
}

// TestAPIPythonClient installs the Python package clients/python into a
// fresh venv (offline: --no-build-isolation --no-index, building with
// Debian's setuptools and wheel, which --system-site-packages lets the
// venv see) and runs its tests with that venv's
// Python against a real API and worker: the offline tests (webhook
// signatures, pass@k, retries against a local server) and the API's (a
// 200-job batch, a single job, events byte-exact and resumed, a judged
// job, an evaluation's pass@k, cancel, artifacts, a session, 429s from a
// key with --rate 1 retried after Retry-After, a webhook verified,
// the asyncio client). Every test must pass; none may be skipped.
func TestAPIPythonClient(t *testing.T) {
	t.Parallel()
	// Debian's: a python3 earlier on PATH (pyenv) may lack venv or the
	// setuptools an offline install builds with.
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is needed (make setup): %v", python, err)
	}
	dir := t.TempDir()
	// A copy: pip builds a local project in its own directory (build/,
	// *.egg-info), which is not this test's to write.
	pkg := filepath.Join(dir, "clients-python")
	require.NoError(t, os.CopyFS(pkg, os.DirFS(filepath.Join("..", "clients", "python"))))
	venv := filepath.Join(dir, "venv")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir // not the package's directory: the tests import the installed package
		cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v:\n%s", name, args, out)
		return string(out)
	}
	run(python, "-m", "venv", "--system-site-packages", venv)
	run(filepath.Join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", pkg)
	py := filepath.Join(venv, "bin", "python")
	where := run(py, "-c", "import sandq, os; print(os.path.dirname(sandq.__file__))")
	require.True(t, strings.HasPrefix(strings.TrimSpace(where), venv), "sandq imported from %s, not the venv", where)

	e := newEnv(t)
	artifacts := t.TempDir()
	e.startWorker("--concurrency", "2", "--artifact-dir", artifacts, "--artifact-prefix", e.prefix)
	a := e.startAPI("--artifact-dir", artifacts, "--webhook-allow-hosts", "127.0.0.1")
	key, slow := e.apiKey("py-tenant"), e.apiKey("py-slow", "--rate", "1")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", filepath.Join(pkg, "tests"), "-t", filepath.Join(pkg, "tests"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SANDQ_API_URL="+a.url, "SANDQ_API_KEY="+key, "SANDQ_API_SLOW_KEY="+slow,
		"SANDQ_BATCH_JOBS=200", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python client tests:\n%s", out)
	require.NoError(t, err)
	s := string(out)
	require.Contains(t, s, "batch: 200 jobs, 200 succeeded")
	require.Regexp(t, `(?m)^OK$`, s, "every test passed, none skipped")
	require.NotContains(t, s, "skipped")
	m := regexp.MustCompile(`Ran (\d+) tests`).FindStringSubmatch(s)
	require.NotNil(t, m)
	n, _ := strconv.Atoi(m[1])
	require.GreaterOrEqual(t, n, 24, "the offline and the API tests ran")
}

// TestAPISessions: sessions over HTTP with a real worker; two tenants
// with the same session ID have two sessions, and neither reaches the
// other's.
func TestAPISessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1", "--max-sessions", "4")
	a := e.startAPI()
	keyA, keyB := e.apiKey("tenant-a"), e.apiKey("tenant-b")
	var info jobs.SessionInfo
	require.Equal(t, 201, call(t, "POST", a.url+"/v1/sessions", keyA, map[string]any{"id": "nb", "lang": "python"}, &info).StatusCode)
	require.Equal(t, "nb", info.ID)
	var r jobs.CellResult
	require.Equal(t, 200, call(t, "POST", a.url+"/v1/sessions/nb/cells", keyA, map[string]any{"code": "secret = 'a'"}, &r).StatusCode)
	require.Equal(t, jobs.CellOK, r.Status)
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/sessions/nb"}, {"POST", "/v1/sessions/nb/cells"}, {"POST", "/v1/sessions/nb/interrupt"},
		{"GET", "/v1/sessions/nb/files"}, {"GET", "/v1/sessions/nb/files/x"}, {"DELETE", "/v1/sessions/nb"},
	} {
		var body any
		if req.path == "/v1/sessions/nb/cells" {
			body = map[string]any{"code": "secret"}
		}
		require.Equal(t, 404, call(t, req.method, a.url+req.path, keyB, body, nil).StatusCode, "%s %s as B", req.method, req.path)
	}
	require.Equal(t, 201, call(t, "POST", a.url+"/v1/sessions", keyB, map[string]any{"id": "nb", "lang": "python"}, nil).StatusCode, "B's own nb")
	require.Equal(t, 200, call(t, "POST", a.url+"/v1/sessions/nb/cells", keyB, map[string]any{"code": "'secret' in globals()"}, &r).StatusCode)
	require.Equal(t, "False", r.Results[0].Data["text/plain"], "B's session knows nothing of A's")
	require.Equal(t, 200, call(t, "POST", a.url+"/v1/sessions/nb/cells", keyA, map[string]any{"code": "secret"}, &r).StatusCode)
	require.Equal(t, "'a'", r.Results[0].Data["text/plain"])
	require.Equal(t, 200, call(t, "DELETE", a.url+"/v1/sessions/nb", keyA, nil, &info).StatusCode)
	require.Equal(t, jobs.SessionClosed, info.State)
	require.Equal(t, 410, call(t, "POST", a.url+"/v1/sessions/nb/cells", keyA, map[string]any{"code": "1"}, nil).StatusCode)
	require.Equal(t, 200, call(t, "POST", a.url+"/v1/sessions/nb/cells", keyB, map[string]any{"code": "1"}, nil).StatusCode, "B's is untouched")
}
