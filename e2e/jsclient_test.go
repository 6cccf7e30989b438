package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/service"
)

// TestAPIJSClient runs the TypeScript client's tests (clients/js, `npm
// ci` then `npm test`, Node's test runner) against a real API and worker:
// a job run, problem details, live output over SSE resumed with
// Last-Event-ID, cancel, artifacts downloaded, a batch, a judged job, a
// session of several cells with files, 429s of a key with a rate of 1/s
// retried after Retry-After, and a webhook delivered to a local server
// and verified; its unit tests check a signature this test makes with the
// server's own service.Sign.
func TestAPIJSClient(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (20 or later) and npm are needed to test clients/js: %v", err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is needed to test clients/js: %v", err)
	}
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	require.NoError(t, err)
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0])
	require.GreaterOrEqual(t, major, 20, "node %s: clients/js needs Node 20 or later (fetch, AbortSignal.any)", out)

	e := newEnv(t)
	e.startWorker("--concurrency", "2", "--max-sessions", "2")
	a := e.startAPI("--webhook-allow-hosts", "127.0.0.1")
	key := e.apiKey("js-tenant")
	slow := e.apiKey("js-rate1", "--rate", "1")

	// A webhook signature made by the server's own code, for the unit test.
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	body := `{"id":"hook-1","status":"succeeded","stdout":"ü\n","stderr":""}`
	vector, err := json.Marshal(map[string]string{"secret": hex.EncodeToString(secret), "t": ts, "body": body,
		"v1": service.Sign(hex.EncodeToString(secret), ts, []byte(body))})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := filepath.Join("..", "clients", "js")
	npmRun := func(args ...string) string {
		cmd := exec.CommandContext(ctx, npm, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SANDQ_API_URL="+a.url, "SANDQ_API_KEY="+key, "SANDQ_API_KEY_RATE1="+slow,
			"SANDQ_WEBHOOK_VECTOR="+string(vector), "SANDQ_BATCH_JOBS=20", "NO_COLOR=1",
			"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
		out, err := cmd.CombinedOutput()
		t.Logf("npm %s:\n%s", strings.Join(args, " "), out)
		require.NoError(t, err, "npm %s", strings.Join(args, " "))
		return string(out)
	}
	npmRun("ci", "--prefer-offline")
	got := npmRun("test")

	// The runner's summary: every test ran and passed, none skipped.
	count := func(what string) int {
		m := regexp.MustCompile(`(?m)^ℹ ` + what + ` (\d+)$`).FindStringSubmatch(got)
		require.NotNil(t, m, "the summary's %q line", what)
		n, _ := strconv.Atoi(m[1])
		return n
	}
	require.GreaterOrEqual(t, count("tests"), 19)
	require.Equal(t, count("tests"), count("pass"))
	require.Zero(t, count("fail"))
	require.Zero(t, count("skipped"))
	require.Zero(t, count("todo"))
	require.Contains(t, got, "batch: 20 jobs, 20 succeeded")
}
