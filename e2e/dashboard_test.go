package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// chromiumPath is Debian's headless Chromium, which scripts/setup.sh
// installs.
const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium (never skipped: a machine without it
// fails here, loudly) and returns a tab's context, ended with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath(chromiumPath)
	require.NoError(t, err, "Chromium is missing: scripts/setup.sh installs Debian's chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")), "Chromium did not start")
	return ctx
}

// pageText reads the text of the first element sel matches, waiting for it.
func pageText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(tctx, chromedp.Text(sel))
	require.NoError(t, err, "the page has no %s", sel)
	return s
}

// waitFor polls the page until the JavaScript expression is true; a
// navigation under way (the job page reloads when its job ends) is
// polled through.
func waitFor(t *testing.T, ctx context.Context, what, expr string, d time.Duration) {
	t.Helper()
	var last error
	ok := assert.Eventually(t, func() bool {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v, err := chromedp.Run(ectx, chromedp.Evaluate[bool](expr))
		last = err
		return err == nil && v
	}, d, 50*time.Millisecond)
	require.True(t, ok, "waiting for %s (last error: %v)", what, last)
}

// shoot writes a screenshot of the page to $SANDQ_SCREENSHOTS/name.png
// when that variable names a directory (make screenshots).
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SANDQ_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "a PNG (quality 100; below it Chromium gives a JPEG)")
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	t.Logf("screenshot %s", filepath.Join(dir, name+".png"))
}

// TestDashboard drives the dashboard in headless Chromium against the api
// binary and a real worker: it logs in through the form (the cookie), then
// follows a job's live output as it runs and finds its stdout and its
// plot (loaded through the cookie) when it has ended; a batch's counts;
// a session's state, cells and files; and, as the operator, the workers
// page and asynqmon. make screenshots runs it to write the pages' PNGs.
func TestDashboard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.startWorker("--artifact-dir", dir, "--artifact-prefix", e.prefix, "--concurrency", "2", "--max-sessions", "2")
	a := e.startAPI("--artifact-dir", dir)
	key := e.apiKey("acme")
	opKey := e.apiKey("ops", "--scope", "jobs:read", "--scope", "tenants:read")
	ctx := browser(t)

	login := func(key string) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/jobs")))
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible("#key")), "an unauthenticated visit lands on the login form")
		require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#key", key)))
		require.NoError(t, chromedp.Do(ctx, chromedp.Click("#login")))
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible("table#jobs")))
	}

	// A wrong key is refused on the form.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/login")))
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#key", "sqk_wrong_key")))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click("#login")))
	require.Contains(t, pageText(t, ctx, "#login-error"), "unknown or revoked API key")

	login(key)

	// A job with live output: its first line is shown while it still runs
	// (the page has not reloaded: no #stdout yet), the rest when it ends.
	// It also draws a plot.
	resp := call(t, "POST", a.url+"/v1/jobs", key, map[string]any{"id": "live", "lang": "python", "stream": true, "limits": map[string]any{"timeout_ms": 60_000},
		"code": `
import sys, time
print("tick-1 <b>not bold</b>", flush=True)
time.sleep(8)
import matplotlib.pyplot as plt
plt.plot([1, 3, 2])
plt.show()
print("tick-2")
print("to stderr", file=sys.stderr)
`}, nil)
	require.Equal(t, 202, resp.StatusCode)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/jobs/live")))
	waitFor(t, ctx, "the first line, live", `(document.getElementById("live-stdout")||{textContent:""}).textContent.includes("tick-1 <b>not bold</b>")`, time.Minute)
	live, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("stdout") === null && !document.getElementById("live-stdout").textContent.includes("tick-2")`))
	require.NoError(t, err)
	require.True(t, live, "tick-1 came through the live stream, before the job ended")
	shoot(t, ctx, "job-live")
	waitFor(t, ctx, "the ended job's page", `document.getElementById("stdout") !== null`, 2*time.Minute)
	require.Equal(t, "succeeded", pageText(t, ctx, "#status"))
	require.Equal(t, "tick-1 <b>not bold</b>\ntick-2", strings.TrimSpace(pageText(t, ctx, "#stdout")), "output shown as text, not as HTML")
	require.Equal(t, "to stderr", strings.TrimSpace(pageText(t, ctx, "#stderr")))
	waitFor(t, ctx, "the plot, loaded", `[...document.querySelectorAll(".plots img")].some(i => i.complete && i.naturalWidth > 0)`, 30*time.Second)
	require.Contains(t, pageText(t, ctx, "#files"), "plots/plot-001.png")
	require.Contains(t, pageText(t, ctx, "table.timing"), "Waited in the queue")
	shoot(t, ctx, "job")

	// The jobs list shows it.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/jobs?lang=python")))
	require.Contains(t, pageText(t, ctx, "table#jobs"), "live")
	shoot(t, ctx, "jobs")

	// A batch: two succeed, one fails; its page refreshes until done.
	batch := []map[string]any{
		{"id": "ok-1", "lang": "python", "code": "print(1)"},
		{"id": "ok-2", "lang": "python", "code": "print(2)"},
		{"id": "bad", "lang": "python", "code": "raise SystemExit(3)"},
	}
	require.Equal(t, 201, call(t, "POST", a.url+"/v1/batches?id=nightly", key, batch, nil).StatusCode)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/batches")))
	require.Contains(t, pageText(t, ctx, "table#batches"), "nightly")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/batches/nightly")))
	waitFor(t, ctx, "the batch done", `(document.getElementById("done")||{}).textContent === "3"`, 2*time.Minute)
	require.Equal(t, "3", pageText(t, ctx, "#total"))
	require.Equal(t, "2", pageText(t, ctx, `td[data-status="succeeded"]`))
	require.Equal(t, "1", pageText(t, ctx, `td[data-status="failed"]`))
	require.Contains(t, pageText(t, ctx, "#failures"), "failed")
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#batch-jobs tbody tr td:first-child")].map(td => td.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"ok-1", "ok-2", "bad"}, order, "the batch's jobs in its order")
	shoot(t, ctx, "batch")

	// A session: its state, its cells, its files.
	var info jobs.SessionInfo
	require.Equal(t, 201, call(t, "POST", a.url+"/v1/sessions", key, map[string]any{"id": "nb", "lang": "python"}, &info).StatusCode)
	var cell jobs.CellResult
	require.Equal(t, 200, call(t, "POST", a.url+"/v1/sessions/nb/cells", key, map[string]any{"code": "open('notes.txt', 'w').write('x' * 42)"}, &cell).StatusCode)
	require.Equal(t, jobs.CellOK, cell.Status)
	require.Equal(t, 200, call(t, "POST", a.url+"/v1/sessions/nb/cells", key, map[string]any{"code": "print('<b>from</b> the cell')"}, &cell).StatusCode)
	require.Equal(t, jobs.CellOK, cell.Status)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/sessions")))
	require.Contains(t, pageText(t, ctx, "table#sessions"), "nb")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/sessions/nb")))
	require.Equal(t, "ready", pageText(t, ctx, "#state"))
	require.Equal(t, "2", pageText(t, ctx, "#cells"))
	require.Contains(t, pageText(t, ctx, "#session-cells"), "open('notes.txt', 'w').write('x' * 42)", "the cell's code")
	require.Contains(t, pageText(t, ctx, "#session-cells"), "<b>from</b> the cell", "the second cell's output, as text")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`#session-cells pre.value`)), "the first cell's value, 42, shown")
	require.Equal(t, "42", pageText(t, ctx, "#session-cells pre.value"))
	require.Contains(t, pageText(t, ctx, "#session-files"), "notes.txt")
	require.Contains(t, pageText(t, ctx, "#session-files"), "42")
	shoot(t, ctx, "session")

	// A tenant's key sees no workers page; logging out ends the login.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/workers")))
	require.Contains(t, pageText(t, ctx, "#error"), "tenants:read")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`header form button`)))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible("#key")))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/jobs/live")))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible("#key")), "logged out: the job page asks for a key")

	// The operator: every tenant's jobs, the workers, asynqmon.
	login(opKey)
	require.Contains(t, pageText(t, ctx, "table#jobs"), "acme")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/workers")))
	servers := pageText(t, ctx, "table#servers")
	require.Contains(t, servers, "/ 2", "the worker, with its 2 job slots")
	require.Contains(t, pageText(t, ctx, "table#queues"), "default")
	require.Contains(t, pageText(t, ctx, "table#fleet"), "yes", "the worker's published slots, its heartbeat alive")
	// Its pools and its jobs' latency, published with its heartbeat (every
	// 10 s): the page is reloaded until they show.
	require.Eventually(t, func() bool {
		if chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/workers")) != nil {
			return false
		}
		return strings.Contains(pageText(t, ctx, "table#pools"), "sandq-python-latest") &&
			strings.Contains(pageText(t, ctx, "table#latency"), "python")
	}, time.Minute, time.Second, "the worker's pools and latency on the workers page")
	shoot(t, ctx, "workers")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.url+"/ui/queues/")))
	waitFor(t, ctx, "asynqmon's queues", fmt.Sprintf(`document.body.innerText.includes(%q)`, e.queuePrefix+":default"), time.Minute)
	shoot(t, ctx, "queues")
}
