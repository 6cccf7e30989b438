package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// redisServer is a private redis-server on a loopback port, for tests that
// restart or break Redis without touching the shared one.
type redisServer struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a free loopback port with its data in
// a temporary directory, persisted as the README recommends (AOF, fsync
// every second), plus args. It is stopped when the test ends.
func startRedis(t testing.TB, args ...string) *redisServer {
	t.Helper()
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	r := &redisServer{t: t, dir: t.TempDir(), args: args}
	r.port, _ = strconv.Atoi(port)
	r.start()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
		"--logfile", filepath.Join(r.dir, "redis.log")}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	require.NoError(r.t, r.cmd.Start(), "redis-server must be installed (make setup)")
	rdb := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		require.True(r.t, time.Now().Before(deadline), "private redis-server on %s did not answer", r.addr())
		time.Sleep(20 * time.Millisecond)
	}
}

// stop shuts Redis down cleanly (SHUTDOWN: the AOF is flushed) and waits.
func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.addr()})
	_ = rdb.Shutdown(context.Background()).Err()
	_ = rdb.Close()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// restart stops Redis and starts it again on the same port and data.
func (r *redisServer) restart() {
	r.t.Helper()
	r.stop()
	r.start()
}

// TestRedisRestartWhileAJobRuns: Redis restarts (cleanly, with its data)
// while a job runs. The worker reconnects, the job ends with its normal
// result after one attempt, and a waiter that was blocked on it gets it.
func TestRedisRestartWhileAJobRuns(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	e := newEnvAt(t, r.addr())
	e.startWorker("--concurrency", "1")
	job := py("import time\nprint('before', flush=True)\ntime.sleep(3)\nprint('after')")
	id := e.enqueue(job)
	e.waitRunning(id, time.Minute)

	waited := make(chan jobs.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := e.client.Wait(ctx, id)
		if err != nil {
			res = jobs.Result{ID: id, Reason: "wait: " + err.Error()}
		}
		waited <- res
	}()
	// Restart once the waiter is subscribed: it must live through it.
	require.Eventually(t, func() bool {
		n, err := e.rdb.PubSubNumSub(context.Background(), e.client.Store().DoneChannel(id)).Result()
		return err == nil && n[e.client.Store().DoneChannel(id)] == 1
	}, time.Minute, 10*time.Millisecond)
	r.restart()

	res := <-waited
	require.Equal(t, jobs.StatusSucceeded, res.Status, res.Reason)
	require.Equal(t, "before\nafter\n", res.Stdout)
	require.Equal(t, 1, res.Attempts, "the job ran once")
	// And the worker goes on taking jobs.
	require.Equal(t, jobs.StatusSucceeded, e.wait(e.enqueue(py("print(2)")), time.Minute).Status)
}
