package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/store"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// These tests run the real command tree in-process against the real Redis
// at SANDQ_REDIS_ADDR (default 127.0.0.1:6379); they fail, not skip,
// without it. No worker runs: a job stays queued until canceled, or until
// a test stores its final Result the way a worker would.

// testBundle is one test's CLI and its private namespace in Redis.
type testBundle struct {
	ns     *jobstest.Namespace
	rdb    *redis.Client
	addr   string
	prefix string // both the key prefix and the queue prefix
	store  *store.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ns := jobstest.NewNamespace(t, "enqueue")
	return &testBundle{ns: ns, rdb: ns.RDB, addr: ns.Addr, prefix: ns.Prefix, store: ns.Store}
}

// keys lists the test's keys: its own and its asynq queues'.
func (b *testBundle) keys(t *testing.T) []string { return b.ns.Keys(t) }

// result is one run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the CLI in-process with args after the global flags that point
// it at the test's namespace, stdin as its stdin, no signals, and a clean
// environment.
func (b *testBundle) cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return b.cliApp(t, &app{stdin: strings.NewReader(stdin)}, args...)
}

func (b *testBundle) cliApp(t *testing.T, a *app, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a.stdout, a.stderr = &stdout, &stderr
	if a.stdin == nil {
		a.stdin = strings.NewReader("")
	}
	a.getenv = func(string) string { return "" }
	full := append([]string{"--redis", b.addr, "--prefix", b.prefix, "--queue-prefix", b.prefix}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := a.run(ctx, full)
	t.Logf("enqueue %s → %d\nstdout: %q\nstderr: %q", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// putResult stores r as a worker would.
func (b *testBundle) putResult(t *testing.T, r jobs.Result) {
	t.Helper()
	_, written, err := b.store.Put(context.Background(), r)
	require.NoError(t, err)
	require.True(t, written)
}

func decodeResult(t *testing.T, s string) jobs.Result {
	t.Helper()
	var r jobs.Result
	require.NoError(t, json.Unmarshal([]byte(s), &r), s)
	return r
}

// run without --wait, then status, then cancel: the whole life of a job
// that no worker takes.
func TestRunStatusCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)

	res := b.cli(t, "print('hi')\n", "run", "--lang", "py", "--id", "job-1", "--tag", "k=v", "-")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "job-1\n", res.stdout)
	require.Empty(t, res.stderr)

	res = b.cli(t, "", "status", "job-1")
	require.Equal(t, 0, res.code, res.stderr)
	r := decodeResult(t, res.stdout)
	require.Equal(t, jobs.StatusQueued, r.Status)
	require.Equal(t, "python", r.Lang)
	require.Equal(t, jobs.QueueDefault, r.Queue)
	require.Equal(t, map[string]string{"k": "v"}, r.Tags)

	res = b.cli(t, "", "status", "--short", "job-1")
	require.Equal(t, result{code: 0, stdout: "queued\n"}, res)

	// Enqueueing the ID again adds nothing and says so.
	res = b.cli(t, "print('again')\n", "run", "--lang", "py", "--id", "job-1", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.JSONEq(t, `{"id": "job-1", "queue": "default", "existing": true, "status": "queued"}`, res.stdout)
	require.Contains(t, res.stderr, "job job-1 already exists (status queued)")

	res = b.cli(t, "", "cancel", "job-1")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "job job-1 canceled (canceled while queued)\n", res.stdout)

	res = b.cli(t, "", "status", "--short", "job-1")
	require.Equal(t, result{code: 0, stdout: "canceled\n"}, res)

	res = b.cli(t, "", "cancel", "job-1")
	require.Equal(t, result{code: 0, stdout: "job job-1 already finished with status canceled\n"}, res)

	// Waiting for a canceled job returns at once and mirrors it.
	res = b.cli(t, "", "wait", "job-1")
	require.Equal(t, result{code: 130, stderr: "sandq: job job-1 canceled: canceled while queued\n"}, res)
}

// The language comes from the file's extension; the ID is generated.
func TestRunFileInfersLang(t *testing.T) {
	t.Parallel()
	b := setup(t)

	dir := t.TempDir()
	prog := filepath.Join(dir, "hello.py")
	require.NoError(t, os.WriteFile(prog, []byte("print(open('in.txt').read())\n"), 0o644))
	data := filepath.Join(dir, "data.txt")
	require.NoError(t, os.WriteFile(data, []byte{0xff, 0x00, 'x'}, 0o755))

	res := b.cli(t, "", "run", "--json", "--file", data+":in.txt", "--timeout", "2s", "--queue", "batch", prog)
	require.Equal(t, 0, res.code, res.stderr)
	var info enqueueInfoJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &info))
	require.True(t, jobs.ValidID(info.ID), info.ID)
	require.Equal(t, jobs.QueueBatch, info.Queue)

	// The task on the queue is the job we meant, files carried byte-exact.
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	ti, err := insp.GetTaskInfo(store.AsynqQueue(b.prefix, jobs.QueueBatch), info.ID)
	require.NoError(t, err)
	j, err := store.DecodeTask(asynq.NewTask(ti.Type, ti.Payload))
	require.NoError(t, err)
	require.Equal(t, "python", j.Lang)
	require.Equal(t, int64(2000), j.Limits.TimeoutMS)
	require.Equal(t, []jobs.File{{Path: "in.txt", ContentB64: []byte{0xff, 0x00, 'x'}, Mode: 0o755}}, j.Files)
}

// An invalid job exits 64 with the reason, and Redis is not touched.
func TestRunInvalidJob(t *testing.T) {
	t.Parallel()
	b := setup(t)

	supported := strings.Join(slices.Sorted(maps.Keys(langs.Names())), ", ")
	res := b.cli(t, "DISPLAY 'HI'.", "run", "--lang", "cobol", "-")
	require.Equal(t, 64, res.code)
	require.Empty(t, res.stdout)
	require.Equal(t, `enqueue: invalid job: lang (--lang): unknown language "cobol"; supported: `+supported+"\n", res.stderr)

	res = b.cli(t, "print(1)", "run", "--lang", "py", "--memory", "999999", "-")
	require.Equal(t, 64, res.code)
	require.Contains(t, res.stderr, "enqueue: invalid job: limits.memory_mb (--memory): 999999 MiB exceeds the operator cap")

	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.cob")
	require.NoError(t, os.WriteFile(prog, []byte("puts 1"), 0o644))
	res = b.cli(t, "", "run", prog)
	require.Equal(t, 64, res.code)
	require.Contains(t, res.stderr, `pass --lang (none could be inferred from "prog.cob")`)

	require.Empty(t, b.keys(t))
	ok, err := b.rdb.SIsMember(context.Background(), "asynq:queues", store.AsynqQueue(b.prefix, jobs.QueueDefault)).Result()
	require.NoError(t, err)
	require.False(t, ok, "the default queue was registered")
}

// Usage errors and unknown jobs exit 2.
func TestUsageAndUnknownJob(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, tt := range []struct {
		name, stdin string
		args        []string
		stderr      string
	}{
		{"status unknown", "", []string{"status", "nope"}, "enqueue: job nope not found"},
		{"wait unknown", "", []string{"wait", "nope"}, "enqueue: job nope not found"},
		{"cancel unknown", "", []string{"cancel", "nope"}, "enqueue: job nope not found"},
		{"status without ID", "", []string{"status"}, "accepts 1 arg(s), received 0\nRun 'enqueue status --help' for usage."},
		{"unknown flag", "", []string{"run", "--bogus"}, "unknown flag: --bogus\nRun 'enqueue run --help' for usage."},
		{"bad env flag", "x", []string{"run", "--lang", "py", "--env", "NOEQUALS", "-"}, `--env "NOEQUALS": want KEY=VALUE`},
		{"stdin twice", "x", []string{"run", "--lang", "py", "--stdin-file", "-", "-"}, "cannot both read stdin"},
		{"missing file", "", []string{"run", "/nonexistent/prog.py"}, "program /nonexistent/prog.py: open /nonexistent/prog.py: no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := b.cli(t, tt.stdin, tt.args...)
			require.Equal(t, 2, res.code)
			require.Empty(t, res.stdout)
			require.Contains(t, res.stderr, tt.stderr)
		})
	}
}

// wait prints a finished job's output byte-exact and mirrors its status.
func TestWaitPrintsResult(t *testing.T) {
	t.Parallel()
	b := setup(t)

	res := b.cli(t, "import sys; sys.exit(3)", "run", "--lang", "py", "--id", "job-f", "-")
	require.Equal(t, 0, res.code, res.stderr)

	final := jobs.Result{
		ID: "job-f", Status: jobs.StatusFailed, ExitCode: new(3), Lang: "python",
		Usage: jobs.Usage{WallMS: 17}, FinishedAt: time.Now().UTC(),
	}
	final.SetStdout([]byte{'o', 'u', 't', 0xff, '\n'}) // not UTF-8: stored as base64
	final.SetStderr([]byte("err\n"))
	b.putResult(t, final)

	res = b.cli(t, "", "wait", "job-f")
	require.Equal(t, result{
		code:   3,
		stdout: "out\xff\n",
		stderr: "err\nsandq: job job-f failed (exit 3, 17 ms wall)\n",
	}, res)

	res = b.cli(t, "", "wait", "--json", "job-f")
	require.Equal(t, 3, res.code)
	require.Empty(t, res.stderr)
	got := decodeResult(t, res.stdout)
	out, err := got.StdoutBytes()
	require.NoError(t, err)
	require.Equal(t, []byte{'o', 'u', 't', 0xff, '\n'}, out)
	require.Equal(t, jobs.StatusFailed, got.Status)
}

// wait shows a failed install's output, and a note on a successful one.
func TestWaitPrintsInstall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.cli(t, "print(1)", "run", "--lang", "py", "--lib", "nosuch", "--id", "job-i", "-")
	require.Equal(t, 0, res.code, res.stderr)
	step := &jobs.StepResult{ExitCode: new(1)}
	step.SetStderr([]byte("ERROR: No matching distribution found for nosuch\n"))
	b.putResult(t, jobs.Result{
		ID: "job-i", Status: jobs.StatusFailed, Lang: "python", FinishedAt: time.Now().UTC(),
		Reason:  "installing libraries failed: pip exited with status 1 (the installer's output is in install.step)",
		Install: &jobs.InstallResult{TookMS: 900, Step: step},
	})
	res = b.cli(t, "", "wait", "job-i")
	require.Equal(t, result{code: 1, stderr: "ERROR: No matching distribution found for nosuch\n" +
		"sandq: job job-i failed: installing libraries failed: pip exited with status 1 (the installer's output is in install.step)\n"}, res)

	res = b.cli(t, "print(1)", "run", "--lang", "py", "--lib", "numpy", "--id", "job-j", "-")
	require.Equal(t, 0, res.code, res.stderr)
	ok := jobs.Result{ID: "job-j", Status: jobs.StatusSucceeded, ExitCode: new(0), Lang: "python", FinishedAt: time.Now().UTC(),
		Install: &jobs.InstallResult{Cached: true, TookMS: 0}}
	ok.SetStdout([]byte("1\n"))
	b.putResult(t, ok)
	res = b.cli(t, "", "wait", "job-j")
	require.Equal(t, result{code: 0, stdout: "1\n", stderr: "sandq: libraries already installed (0 ms)\nsandq: job job-j succeeded (exit 0)\n"}, res)
}

// run --wait blocks until the result is stored and mirrors it.
func TestRunWait(t *testing.T) {
	t.Parallel()
	b := setup(t)

	a := &app{stdin: strings.NewReader("print('hi')")}
	a.waitHook = func(id string) {
		// A worker finishing the job just as the CLI starts waiting.
		r := jobs.Result{
			ID: id, Status: jobs.StatusTimeout, Signal: "SIGKILL", Reason: "wall-clock limit of 1000 ms",
			Usage: jobs.Usage{WallMS: 1003}, FinishedAt: time.Now().UTC(),
		}
		r.SetStdout([]byte("partial"))
		b.putResult(t, r)
	}
	res := b.cliApp(t, a, "run", "--lang", "py", "--id", "job-w", "--timeout", "1s", "--wait", "-")
	require.Equal(t, result{
		code:   124,
		stdout: "partial",
		// "partial" has no newline: the status line starts its own.
		stderr: "\nsandq: job job-w timeout (signal SIGKILL, 1003 ms wall): wall-clock limit of 1000 ms\n",
	}, res)
}

// Ctrl-C while waiting stops waiting, leaves the job alone and says how to
// resume or cancel it.
func TestRunWaitInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var sigc chan<- os.Signal
	a := &app{
		stdin:      strings.NewReader("print('hi')"),
		notify:     func(c chan<- os.Signal) { sigc = c },
		stopNotify: func(chan<- os.Signal) {},
		waitHook:   func(string) { sigc <- os.Interrupt },
	}
	res := b.cliApp(t, a, "run", "--lang", "py", "--id", "job-i", "--wait", "--json", "-")
	require.Equal(t, 130, res.code)
	require.Empty(t, res.stdout)
	flags := "--redis=" + b.addr + " --prefix=" + b.prefix + " --queue-prefix=" + b.prefix
	require.Equal(t, "enqueue: stopped waiting for job job-i (interrupted by SIGINT); it is still queued and was not canceled\n"+
		"enqueue: to wait again: enqueue "+flags+" wait job-i\n"+
		"enqueue: to cancel it:  enqueue "+flags+" cancel job-i\n", res.stderr)

	res = b.cli(t, "", "status", "--short", "job-i")
	require.Equal(t, result{code: 0, stdout: "queued\n"}, res)
}

// wait --timeout gives up with 75 and leaves the job queued.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)

	res := b.cli(t, "print(1)", "run", "--lang", "py", "--id", "job-t", "-")
	require.Equal(t, 0, res.code, res.stderr)

	// An already expired deadline: the wait cannot see the job end.
	res = b.cli(t, "", "wait", "--timeout", "1ns", "job-t")
	require.Equal(t, 75, res.code)
	require.Empty(t, res.stdout)
	require.Contains(t, res.stderr, "stopped waiting for job job-t (wait timeout expired); it is still queued")
}

// --job-json supplies the job; the command line overrides it.
func TestRunJobJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)

	job := `{"id": "job-j", "lang": "python", "code": "print(1)", "limits": {"timeout_ms": 5000}, "queue": "critical"}`
	res := b.cli(t, job, "run", "--job-json", "-", "--timeout", "3s", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.JSONEq(t, `{"id": "job-j", "queue": "critical", "existing": false, "status": "queued"}`, res.stdout)

	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	ti, err := insp.GetTaskInfo(store.AsynqQueue(b.prefix, jobs.QueueCritical), "job-j")
	require.NoError(t, err)
	j, err := store.DecodeTask(asynq.NewTask(ti.Type, ti.Payload))
	require.NoError(t, err)
	require.Equal(t, int64(3000), j.Limits.TimeoutMS)
	require.Equal(t, "print(1)", j.Code)

	res = b.cli(t, `{"lnag": "python"}`, "run", "--job-json", "-")
	require.Equal(t, 64, res.code)
	require.Contains(t, res.stderr, `--job-json -: json: unknown field "lnag"`)
}
