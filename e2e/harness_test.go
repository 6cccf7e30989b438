// Package e2e holds end-to-end tests of the queue fleet: real worker
// processes (built from cmd/worker), real Redis, real Docker. Each test has
// its own key prefix, queue prefix and container owner, so tests run side by
// side on one Redis and one engine.
package e2e

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

var bins struct {
	dir     string
	worker  string
	enqueue string
	api     string
}

func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "sandq-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.worker = filepath.Join(dir, "worker")
	bins.enqueue = filepath.Join(dir, "enqueue")
	bins.api = filepath.Join(dir, "api")
	for out, pkg := range map[string]string{bins.worker: "./cmd/worker", bins.enqueue: "./cmd/enqueue", bins.api: "./cmd/api"} {
		args := []string{"build", "-tags", sandbox.PodmanBuildTags, "-o", out} // both backends
		env := os.Environ()
		if benchmarking() {
			// Benchmarks measure the binary that ships, built as
			// deploy/worker.Dockerfile builds it: static, without cgo
			// (a cgo build maps libc and touches 12 MB more of its own
			// pages: worker RSS idle 49 MB against 37 MB).
			args = append(args, "-trimpath", "-ldflags=-s -w")
			env = append(env, "CGO_ENABLED=0")
		} else {
			args = append(args, "-race")
		}
		args = append(args, pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = ".."
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n", pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func redisAddr() string { return cmp.Or(os.Getenv("SANDQ_REDIS_ADDR"), "127.0.0.1:6379") }

// env is one test's namespace: its Redis prefixes and a client.
type env struct {
	t         testing.TB
	owners    []string
	redisAddr string
	// redisExtra are the Redis flags besides --redis every process of the
	// env gets (--redis-master for a Sentinel set).
	redisExtra  []string
	rdb         redis.UniversalClient
	client      *client.Client
	rt          *sandbox.Docker
	prefix      string
	queuePrefix string
}

func newEnv(t testing.TB) *env { return newEnvAt(t, redisAddr()) }

// newEnvAt is newEnv on the Redis at addr.
func newEnvAt(t testing.TB, addr string) *env { return newEnvWith(t, config.Redis{Addr: addr}) }

// newEnvWith is newEnv on the Redis r names: several addresses are a
// Cluster, a MasterName a Sentinel set.
func newEnvWith(t testing.TB, r config.Redis) *env {
	t.Helper()
	rdb := r.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, rdb.Ping(ctx).Err(), "e2e tests need Redis at %s (make setup)", r.Addr)
	rt, err := sandbox.NewDocker(sandbox.DockerConfig{})
	require.NoError(t, err)
	require.NoError(t, rt.Ping(ctx), "e2e tests need the Docker engine (make setup)")
	e := &env{t: t, redisAddr: r.Addr, rdb: rdb, rt: rt, prefix: "e2e-" + jobs.NewID()[:12]}

	if r.MasterName != "" {
		e.redisExtra = []string{"--redis-master", r.MasterName}
	}
	e.queuePrefix = e.prefix
	if r.Mode() == "cluster" {
		e.prefix = "{" + e.prefix + "}" // as the binaries make it (config.Redis.KeyPrefix)
	}
	e.client, err = client.New(client.Config{Redis: rdb, Prefix: e.prefix, QueuePrefix: e.queuePrefix})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = e.client.Close()
		e.cleanupRedis()
		removeNamespaceVolumes(rt, e.prefix)
		_ = rt.Close()
		_ = rdb.Close()
	})
	return e
}

// redisFlags are the Redis flags of every process of e.
func (e *env) redisFlags() []string { return append([]string{"--redis", e.redisAddr}, e.redisExtra...) }

// removeNamespaceVolumes removes an engine's library volumes of one
// namespace (its workers are gone by now), and no other: tests running
// alongside keep theirs. Best effort, as the rest of a test's cleanup.
func removeNamespaceVolumes(rt sandbox.Runtime, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vols, err := rt.ListVolumes(ctx, map[string]string{sandbox.LabelNamespace: namespace})
	if err != nil {
		return
	}
	for _, v := range vols {
		_ = rt.RemoveVolume(ctx, v.Name, true)
	}
}

func (e *env) cleanupRedis() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	for _, q := range jobs.Queues() {
		_ = insp.DeleteQueue(store.AsynqQueue(e.queuePrefix, q), true)
	}
	sweep := func(ctx context.Context, c redis.UniversalClient) error {
		for _, pattern := range []string{e.prefix + ":*", "asynq:{" + e.queuePrefix + ":*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			// One DEL per key, pipelined: a Cluster's keys live in many slots.
			_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Del(ctx, k)
				}
				return nil
			})
		}
		return nil
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return sweep(ctx, c) })
		return
	}
	_ = sweep(ctx, e.rdb)
}

// worker is a running worker process.
type worker struct {
	t     testing.TB
	owner string
	cmd   *exec.Cmd
	done  chan struct{}
	mu    sync.Mutex
	log   strings.Builder
	sent  []os.Signal // by signal: the exits they cause are expected
	err   error
}

// startWorker starts a worker process for e's namespace and waits until it
// reports that it is serving.
func (e *env) startWorker(args ...string) *worker {
	e.t.Helper()
	w := &worker{t: e.t, owner: e.prefix + "-" + jobs.NewID()[:6], done: make(chan struct{})}
	e.owners = append(e.owners, w.owner)
	base := append(e.redisFlags(),
		"--prefix", e.prefix, "--queue-prefix", e.queuePrefix, "--owner", w.owner,
		"--metrics-addr", "", "--log-level", "info",
		// Reading 11 images' versions costs a container each; the tests
		// that need them pass --publish-versions=true (the last wins).
		"--publish-versions=false",
	)
	if !engineGrantsSysResource() {
		// Such an engine's workers refuse to start unless told (see
		// TestWorkerStatesProtections).
		base = append(base, "--allow-unpinned-oom")
	}
	w.cmd = exec.Command(bins.worker, append(base, args...)...)
	w.cmd.Env = append(os.Environ(), "SANDQ_TEST_WORKER=1")
	stderr, err := w.cmd.StderrPipe()
	require.NoError(e.t, err)
	require.NoError(e.t, w.cmd.Start())
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			w.mu.Lock()
			w.log.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
			if strings.Contains(sc.Text(), `"worker started"`) {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	e.t.Cleanup(func() {
		w.signal(syscall.SIGKILL)
		<-w.done
		checkProcess(e.t, "worker "+w.owner, w.err, w.sentSignals(), w.logs())
		if e.t.Failed() {
			e.t.Logf("worker %s log:\n%s", w.owner, w.logs())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, _ := e.rt.List(ctx, map[string]string{sandbox.LabelOwner: w.owner})
		for _, c := range left {
			_ = e.rt.Remove(ctx, c.ID)
		}
	})
	select {
	case <-ready:
	case <-w.done:
		e.t.Fatalf("worker exited before serving: %v\n%s", w.err, w.logs())
	case <-time.After(60 * time.Second):
		e.t.Fatalf("worker did not start in 60 s\n%s", w.logs())
	}
	return w
}

// waitLog waits until the worker has logged a line containing substr.
func (w *worker) waitLog(substr string, d time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(w.logs(), substr) {
		select {
		case <-w.done:
			w.t.Fatalf("worker %s exited before logging %q: %v\n%s", w.owner, substr, w.err, w.logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("worker %s did not log %q within %s\n%s", w.owner, substr, d, w.logs())
		}
	}
}

func (w *worker) logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.String()
}

// signal sends sig to the worker unless it has exited. A death by a
// signal sent here is expected (the harness's SIGKILL at cleanup, a test
// that kills a worker on purpose); any other end but exit status 0 fails
// the test (checkProcess).
func (w *worker) signal(sig os.Signal) {
	select {
	case <-w.done:
	default:
		w.mu.Lock()
		w.sent = append(w.sent, sig)
		w.mu.Unlock()
		_ = w.cmd.Process.Signal(sig)
	}
}

func (w *worker) sentSignals() []os.Signal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sent)
}

// checkProcess fails t when a process the harness started (a worker, the
// API; built with -race) logged a data race, or ended other than with
// status 0 or by one of the signals sent to it: a crash, a fatal error, or
// the race detector's exit status. The failure shows the end of its log.
func checkProcess(t testing.TB, name string, waitErr error, sent []os.Signal, log string) {
	t.Helper()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("%s logged a data race:\n%s", name, logExcerpt(log, "WARNING: DATA RACE"))
	}
	if waitErr == nil {
		return
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && slices.Contains(sent, os.Signal(ws.Signal())) {
			return
		}
	}
	t.Errorf("%s ended unexpectedly (%v; signals sent to it: %v); its log:\n%s", name, waitErr, sent,
		logExcerpt(log, "panic: ", "fatal error: ", "SIGSEGV: ", "SIGBUS: ", "SIGABRT: ", "SIGQUIT: "))
}

// logExcerpt is 60 lines of a process's log: from the first line that
// starts with one of from (the start of a race report or of a Go crash),
// else its last 60 lines.
func logExcerpt(log string, from ...string) string {
	const n = 60
	lines := strings.SplitAfter(strings.TrimRight(log, "\n"), "\n")
	for i, l := range lines {
		for _, f := range from {
			if strings.HasPrefix(l, f) {
				if len(lines) > i+n {
					return strings.Join(lines[i:i+n], "") + "[...]\n"
				}
				return strings.Join(lines[i:], "")
			}
		}
	}
	if len(lines) > n {
		return "[...]\n" + strings.Join(lines[len(lines)-n:], "")
	}
	return strings.Join(lines, "")
}

// wait waits for the worker process to exit and returns its error.
func (w *worker) wait(d time.Duration) error {
	w.t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(d):
		w.t.Fatalf("worker %s did not exit within %s\n%s", w.owner, d, w.logs())
		return nil
	}
}

// containers lists the worker's containers.
func (e *env) containers(owner string) []sandbox.ContainerInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := e.rt.List(ctx, map[string]string{sandbox.LabelOwner: owner})
	require.NoError(e.t, err)
	return cs
}

// workerOwners returns the owner IDs of the workers started so far.
func (e *env) workerOwners() []string { return e.owners }

func (e *env) enqueue(j jobs.Job) string {
	e.t.Helper()
	info, err := e.client.Enqueue(context.Background(), j)
	require.NoError(e.t, err)
	require.NoError(e.t, info.Err)
	return info.ID
}

func (e *env) wait(id string, d time.Duration) jobs.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := e.client.Wait(ctx, id)
	require.NoError(e.t, err, "job %s", id)
	return r
}

// waitStatus blocks until the job's stored status is want, using the
// client's Wait for final statuses and the done channel otherwise.
func (e *env) waitRunning(id string, d time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r, err := e.client.Get(context.Background(), id)
		require.NoError(e.t, err)
		if r.Status == jobs.StatusRunning {
			return
		}
		require.False(e.t, r.Status.Final(), "job %s ended %s before it was seen running: %s", id, r.Status, r.Reason)
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("job %s not running after %s", id, d)
}

func py(code string) jobs.Job { return jobs.Job{Lang: "python", Code: code} }

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// engineGrantsSysResource reports whether the engines here can grant a
// container CAP_SYS_RESOURCE: whether it is in this process's bounding
// set (the engines run beside the tests, as root, on this machine).
func engineGrantsSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<24) != 0 // CAP_SYS_RESOURCE
		}
	}
	return false
}
