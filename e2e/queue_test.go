package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/store"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

func TestEnqueueWorkerResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	metricsAddr := freeAddr(t)
	e.startWorker("--concurrency", "2", "--metrics-addr", metricsAddr)

	id := e.enqueue(py("import sys\nprint('hello from', sys.argv[1:])"))
	r := e.wait(id, time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, "hello from []\n", r.Stdout)
	require.NotNil(t, r.ExitCode)
	require.Equal(t, 0, *r.ExitCode)
	require.Equal(t, 1, r.Attempts)
	require.Positive(t, r.Usage.WallMS+r.Usage.CPUMS)

	// Raw JSON through redis-cli, as any non-Go client would read it.
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", "6379", "GET", e.client.Store().ResultKey(id)).Output()
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(out), &raw), string(out))
	require.Equal(t, "succeeded", raw["status"])
	require.Equal(t, "hello from []\n", raw["stdout"])
	require.Equal(t, id, raw["id"])

	// From the CLI.
	cli := exec.Command(bins.enqueue, "--prefix", e.prefix, "--queue-prefix", e.queuePrefix, "status", id)
	out, err = cli.Output()
	require.NoError(t, err)
	var viaCLI jobs.Result
	require.NoError(t, json.Unmarshal(out, &viaCLI), string(out))
	require.Equal(t, jobs.StatusSucceeded, viaCLI.Status)
	require.Equal(t, r.Stdout, viaCLI.Stdout)

	// Health and metrics.
	body := httpGet(t, "http://"+metricsAddr+"/healthz")
	require.Equal(t, "ok\n", body)
	body = httpGet(t, "http://"+metricsAddr+"/metrics")
	require.Contains(t, body, `sandq_jobs_total{lang="python",status="succeeded"} 1`)
	require.Contains(t, body, `sandq_pool_containers{pool=`)

	// Statuses of user-code outcomes, none retried.
	e.checkUserOutcomes(t)
}

// checkUserOutcomes runs every job of userOutcomes on the env's worker,
// each a subtest of t: each ends with its status, after one attempt.
func (e *env) checkUserOutcomes(t *testing.T) {
	t.Helper()
	host, accepted := hostListener(t)
	for _, tt := range userOutcomes(host) {
		t.Run(tt.name, func(t *testing.T) {
			r := e.wait(e.enqueue(tt.job), time.Minute)
			require.Equal(t, tt.status, r.Status, r.Reason)
			require.Equal(t, 1, r.Attempts, "user-code outcomes are never retried")
			require.NotEmpty(t, r.Reason)
		})
	}
	require.Zero(t, accepted(), "a sandbox reached the host's listener")
}

// userOutcomes are jobs whose program fails in each way a program can,
// with the status each must end with. Workers on every backend must agree.
// host is an address a container could reach if it had a network.
func userOutcomes(host string) []struct {
	name   string
	job    jobs.Job
	status jobs.Status
} {
	return []struct {
		name   string
		job    jobs.Job
		status jobs.Status
	}{
		{"Failure", py("raise SystemExit(3)"), jobs.StatusFailed},
		{"Timeout", jobs.Job{Lang: "python", Code: "while True: pass", Limits: jobs.Limits{TimeoutMS: 1000}}, jobs.StatusTimeout},
		{"OOM", jobs.Job{Lang: "python", Code: "b = b'x' * (1 << 30)", Limits: jobs.Limits{MemoryMB: 64}}, jobs.StatusOOM},
		{"OutputLimit", jobs.Job{Lang: "python", Code: "print('x' * 100000)", Limits: jobs.Limits{OutputBytes: 1000}}, jobs.StatusOutputLimit},
		{"NoNetwork", py(fmt.Sprintf("import socket\nh, p = %q.rsplit(':', 1)\nsocket.create_connection((h, int(p)), timeout=2)", host)), jobs.StatusFailed},
	}
}

// hostListener listens on every address of this host and returns the
// address a container would reach it at if it had a network: the Docker
// bridge's gateway (docker0), else the host's first non-loopback IPv4
// address. accepted counts the connections it took.
func hostListener(t *testing.T) (addr string, accepted func() int) {
	t.Helper()
	ip := ""
	if ifc, err := net.InterfaceByName("docker0"); err == nil {
		ip = firstIPv4(ifc)
	}
	if ip == "" {
		ifcs, err := net.Interfaces()
		require.NoError(t, err)
		for _, ifc := range ifcs {
			if ifc.Flags&net.FlagLoopback == 0 && ifc.Flags&net.FlagUp != 0 {
				if ip = firstIPv4(&ifc); ip != "" {
					break
				}
			}
		}
	}
	require.NotEmpty(t, ip, "no host address for the no-network check")
	l, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	// The listener is reachable from here at that address: the check can
	// fail when a sandbox has a network.
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, fmt.Sprint(l.Addr().(*net.TCPAddr).Port)), 2*time.Second)
	require.NoError(t, err, "the host listener must be reachable at %s", ip)
	_ = c.Close()
	require.Eventually(t, func() bool { return n.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	n.Store(0)
	return net.JoinHostPort(ip, fmt.Sprint(l.Addr().(*net.TCPAddr).Port)), func() int { return int(n.Load()) }
}

func firstIPv4(ifc *net.Interface) string {
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return ""
}

func TestEnqueueExistingIDRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job := py("import random\nprint(random.random())")
	job.ID = "dup-" + jobs.NewID()[:8]
	first, err := e.client.Enqueue(context.Background(), job)
	require.NoError(t, err)
	require.False(t, first.Existing)
	second, err := e.client.Enqueue(context.Background(), job)
	require.NoError(t, err)
	require.True(t, second.Existing, "the second enqueue reports the existing job")

	e.startWorker()
	r := e.wait(job.ID, time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status)
	require.Equal(t, 1, r.Attempts)
	third, err := e.client.Enqueue(context.Background(), job)
	require.NoError(t, err)
	require.True(t, third.Existing)
	require.Equal(t, jobs.StatusSucceeded, third.Status)
	again, err := e.client.Get(context.Background(), job.ID)
	require.NoError(t, err)
	require.Equal(t, r.Stdout, again.Stdout, "a finished job is not run again")
}

func TestPoisonPayloadRejectedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	ac := asynq.NewClientFromRedisClient(e.rdb)
	queue := store.AsynqQueue(e.queuePrefix, jobs.QueueDefault)
	for _, tt := range []struct {
		name    string
		payload string
		reason  string
	}{
		{"NotJSON", "{not json", "poison"},
		{"UnknownField", `{"lang":"python","code":"print(1)","rm_rf":true}`, "rm_rf"},
		{"UnknownLanguage", `{"lang":"cobol","code":"x"}`, "python"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := "poison-" + jobs.NewID()[:8]
			payload := tt.payload
			if strings.Contains(payload, `"lang"`) {
				payload = strings.Replace(payload, "{", fmt.Sprintf(`{"id":%q,`, id), 1)
			}
			_, err := ac.Enqueue(asynq.NewTask(store.TypeExec, []byte(payload)), asynq.TaskID(id), asynq.Queue(queue), asynq.MaxRetry(5))
			require.NoError(t, err)
			r := e.wait(id, time.Minute)
			require.Equal(t, jobs.StatusRejected, r.Status)
			require.Contains(t, r.Reason, tt.reason)
			require.Equal(t, 1, r.Attempts, "rejected once, never retried")
			// The result is stored before the handler returns; asynq then
			// deletes the task: its payload is not archived.
			insp := asynq.NewInspectorFromRedisClient(e.rdb)
			require.Eventually(t, func() bool {
				_, err := insp.GetTaskInfo(queue, id)
				return errors.Is(err, asynq.ErrTaskNotFound)
			}, 30*time.Second, 10*time.Millisecond, "the task and its payload are gone")
			again, err := e.client.Get(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, r, again, "the result stays")
		})
	}
}

func TestInfrastructureFaultRetriesThenInternalError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// An image that does not exist: every attempt fails in the engine, not
	// in the job.
	e.startWorker("--image-prefix", "sandq-missing-"+jobs.NewID()[:6]+"/", "--warm", "")
	job := py("print(1)")
	retries := 2
	job.MaxRetry = &retries
	r := e.wait(e.enqueue(job), 2*time.Minute)
	require.Equal(t, jobs.StatusInternalError, r.Status)
	require.Equal(t, 3, r.Attempts)
	require.Contains(t, r.Reason, "No such image")
	// Stored final: the task and its payload are deleted, not archived.
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	require.Eventually(t, func() bool {
		_, err := insp.GetTaskInfo(store.AsynqQueue(e.queuePrefix, jobs.QueueDefault), r.ID)
		return errors.Is(err, asynq.ErrTaskNotFound)
	}, 30*time.Second, 10*time.Millisecond)
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("--concurrency", "1", "--max-per-pool", "1")
	job := py("import time\nprint('started', flush=True)\ntime.sleep(60)")
	job.Limits.TimeoutMS = 120_000
	// Streamed, so the cancel comes after the program printed: a process
	// named main.py may be a prestarted interpreter that has not run the
	// job's first line yet.
	job.Stream = true
	id := e.enqueue(job)
	e.waitRunning(id, time.Minute)
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	var seen []byte
	for en, err := range e.client.Stream(ctx, id, "") {
		require.NoError(t, err)
		require.False(t, en.End(), "the job ended before it printed: %s", en.Status)
		if en.Step == "run" && en.Stream == "stdout" {
			seen = append(seen, en.Data...)
		}
		if string(seen) == "started\n" {
			break
		}
	}
	stop()
	require.Equal(t, "started\n", string(seen))

	require.NoError(t, e.client.Cancel(context.Background(), id))
	r := e.wait(id, time.Minute)
	require.Equal(t, jobs.StatusCanceled, r.Status, r.Reason)
	// Wait may report the cancel before the worker has stored its result
	// (asynq fails a canceled task at once); the worker's own follows.
	require.Eventually(t, func() bool {
		var err error
		r, err = e.client.Store().Get(context.Background(), id)
		return err == nil && r.Status.Final()
	}, time.Minute, 10*time.Millisecond)
	require.Equal(t, "canceled while running", r.Reason, "the worker killed the program and stored its output")
	require.Equal(t, "started\n", r.Stdout, "the output so far is kept")
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, "SIGKILL", r.Signal)

	// The same (only) container serves the next job, and it is clean.
	r = e.wait(e.enqueue(py(`
import os
me = os.getpid()
`+forkServerPy+`
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me) and not fork_server(p)), os.listdir('/tmp'), os.listdir('/tmp/.sandq'))
`)), time.Minute)
	// /tmp/.sandq is root's and holds only the (empty) plots dir.
	require.Equal(t, "[] ['.sandq'] ['plots']\n", r.Stdout, r.Stderr)
	require.Len(t, e.containers(w.owner), 1)
}

// TestCancelWhileAcquiring: a job canceled while its handler waits for a
// container (the pool's one container is busy) ends canceled at once, not
// after an infrastructure retry's backoff.
func TestCancelWhileAcquiring(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "2", "--max-per-pool", "1")
	busy := py("import time\nprint('started', flush=True)\ntime.sleep(60)")
	busy.Limits.TimeoutMS = 120_000
	busyID := e.enqueue(busy)
	e.waitRunning(busyID, time.Minute)
	waiting := e.enqueue(py("print('never')"))
	e.waitRunning(waiting, time.Minute) // running is stored before the container is acquired

	require.NoError(t, e.client.Cancel(context.Background(), waiting))
	r := e.wait(waiting, time.Minute)
	require.Equal(t, jobs.StatusCanceled, r.Status, r.Reason)
	require.Empty(t, r.Stdout)
	require.Equal(t, 1, r.Attempts, "canceled on its first attempt, never retried")
	// Get may report a canceled job whose task asynq put back to retry;
	// the worker must have stored the final result itself, on the first
	// attempt (a retry would store "canceled before it started" on its
	// second).
	var stored jobs.Result
	require.Eventually(t, func() bool {
		var err error
		stored, err = e.client.Store().Get(context.Background(), waiting)
		return err == nil && stored.Status == jobs.StatusCanceled
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, 1, stored.Attempts, "the worker stores canceled without a retry: %s", stored.Reason)

	require.NoError(t, e.client.Cancel(context.Background(), busyID))
	require.Equal(t, jobs.StatusCanceled, e.wait(busyID, time.Minute).Status)
}

func TestSIGTERMFinishesOrRequeues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("--concurrency", "3", "--shutdown-timeout", "10s")
	// quick's program has started (not just its job: a cold container can
	// take seconds on a loaded machine) when the worker is told to stop;
	// it needs 1 s of the 10, slow 30.
	q := py("print('started', flush=True)\nimport time\ntime.sleep(1)\nprint('quick done')")
	q.Stream = true
	quick := e.enqueue(q)
	slow := jobs.Job{Lang: "python", Code: "import time\ntime.sleep(30)\nprint('slow done')", Limits: jobs.Limits{TimeoutMS: 60_000}}
	slowID := e.enqueue(slow)
	waitStreamed(t, e, quick, "started")
	e.waitRunning(slowID, time.Minute)

	w.signal(syscall.SIGTERM)
	require.NoError(t, w.wait(time.Minute))
	require.Empty(t, e.containers(w.owner), "a stopped worker leaves no containers")

	r, err := e.client.Get(context.Background(), quick)
	require.NoError(t, err)
	require.Equal(t, jobs.StatusSucceeded, r.Status, "in-flight job within the shutdown timeout finishes")
	r, err = e.client.Get(context.Background(), slowID)
	require.NoError(t, err)
	require.Equal(t, jobs.StatusQueued, r.Status, "in-flight job past the shutdown timeout is requeued: %s", r.Reason)

	// Another worker finishes the requeued job.
	e.startWorker()
	r = e.wait(slowID, 2*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, "slow done\n", r.Stdout)
}

func TestSIGKILLLeaseExpiryOtherWorkerCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dead := e.startWorker("--concurrency", "1")
	job := jobs.Job{Lang: "python", Code: "import time\ntime.sleep(8)\nprint('done')", Limits: jobs.Limits{TimeoutMS: 30_000}}
	id := e.enqueue(job)
	e.waitRunning(id, time.Minute)
	require.Eventually(t, func() bool { return len(e.containers(dead.owner)) > 0 }, time.Minute, 50*time.Millisecond)
	dead.signal(syscall.SIGKILL)
	_ = dead.wait(30 * time.Second)
	require.NotEmpty(t, e.containers(dead.owner), "SIGKILL leaves the dead worker's containers")

	// asynq's recoverer takes a task back 30 s after its lease expired
	// (clock-skew allowance); it runs when a worker starts and every minute.
	// Start the second worker once that time has come.
	queue := "asynq:{" + store.AsynqQueue(e.queuePrefix, jobs.QueueDefault) + "}:lease"
	leases, err := e.rdb.ZRangeWithScores(context.Background(), queue, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, leases, 1)
	time.Sleep(time.Until(time.Unix(int64(leases[0].Score), 0).Add(31 * time.Second)))

	// A grace of 20 s: the dead worker's containers are older (the lease
	// wait above), a container another test's worker (on a Redis of its
	// own, so its owner looks dead from here) creates and has not yet
	// started is younger.
	e.startWorker("--reconcile-interval", "1s", "--reconcile-grace", "20s")
	r := e.wait(id, 2*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, "done\n", r.Stdout)

	// Exactly one final result, and the dead worker's containers go.
	require.Eventually(t, func() bool { return len(e.containers(dead.owner)) == 0 }, 30*time.Second, 200*time.Millisecond)
}

func TestTwoWorkersShareABatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "2")
	e.startWorker("--concurrency", "2")
	const n = 200
	batch := make([]jobs.Job, n)
	for i := range batch {
		batch[i] = jobs.Job{Lang: "python", Code: fmt.Sprintf("print(%d * 2)", i), Queue: jobs.QueueBatch}
	}
	infos, err := e.client.EnqueueBatch(context.Background(), batch)
	require.NoError(t, err)
	require.Len(t, infos, n)
	workers := map[string]int{}
	for i, info := range infos {
		require.NoError(t, info.Err)
		r := e.wait(info.ID, 3*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, fmt.Sprintf("%d\n", i*2), r.Stdout)
		workers[r.Worker]++
	}
	require.Len(t, workers, 2, "both workers took jobs: %v", workers)
}

// TestEngineStoppedMidJob stops the Docker engine under a running job. It
// is not parallel, so it runs before every parallel test of this package,
// and `make test` runs packages one at a time (-p 1): nothing else is using
// the engine. The engine is started again by scripts/setup.sh.
func TestEngineStoppedMidJob(t *testing.T) {
	e := newEnv(t)
	// --engine-wait 2s: each retry waits that long for the engine (held
	// jobs), then fails.
	e.startWorker("--concurrency", "1", "--warm", "", "--engine-wait", "2s")
	job := jobs.Job{Lang: "python", Code: "import time\ntime.sleep(30)", Limits: jobs.Limits{TimeoutMS: 60_000}}
	retries := 2
	job.MaxRetry = &retries
	id := e.enqueue(job)
	e.waitRunning(id, time.Minute)
	require.Eventually(t, func() bool {
		for _, c := range e.containers(e.workerOwners()[0]) {
			if c.State == "running" {
				return true
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond)

	restart := func() {
		// The stopped dockerd may still be stopping containers (up to 10 s
		// per container): wait for it to be gone before starting another.
		var out []byte
		require.Eventually(t, func() bool {
			if exec.Command("docker", "info").Run() == nil {
				return true // up again
			}
			if exec.Command("pgrep", "-x", "dockerd").Run() == nil {
				return false // still stopping
			}
			var err error
			out, err = exec.Command("../scripts/setup.sh").CombinedOutput()
			return err == nil
		}, 3*time.Minute, 200*time.Millisecond, "restart the engine: %s", out)
	}
	t.Cleanup(restart)
	require.NoError(t, exec.Command("pkill", "-TERM", "-x", "dockerd").Run(), "stop dockerd")
	r := e.wait(id, 3*time.Minute)
	require.Equal(t, jobs.StatusInternalError, r.Status, r.Reason)
	require.Equal(t, 3, r.Attempts, "two retries, then internal_error")
	require.Contains(t, r.Reason, "infrastructure fault after 3 attempts")
	t.Logf("reason: %s", r.Reason)
	restart()
}

func TestOperatorDefaultsAndCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--defaults", `{"timeout_ms":1000}`, "--caps", `{"memory_mb":128}`)
	r := e.wait(e.enqueue(py("while True: pass")), time.Minute)
	require.Equal(t, jobs.StatusTimeout, r.Status, "the worker's default timeout applies to a job that sets none")
	require.Contains(t, r.Reason, "1s")

	big := py("print(1)")
	big.Limits.MemoryMB = 512 // under the built-in cap the client checks, over this worker's cap
	r = e.wait(e.enqueue(big), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
	require.Contains(t, r.Reason, "memory_mb")
}

// TestIdleWorkerWokenByEnqueue: a worker told to check its idle queues only
// every ten minutes still takes each job at once, because every enqueue
// wakes it: the client's, and the CLI's, which enqueues and exits. A
// worker that missed the wakes would leave the second job waiting ten
// minutes.
func TestIdleWorkerWokenByEnqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1", "--poll-interval", "10m")

	for i := range 3 {
		id := e.enqueue(py(fmt.Sprintf("print(%d)", i)))
		r := e.wait(id, time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, fmt.Sprintf("%d\n", i), r.Stdout)
	}
	cli := exec.Command(bins.enqueue, "--prefix", e.prefix, "--queue-prefix", e.queuePrefix,
		"run", "--lang", "python", "--queue", "batch", "-")
	cli.Stdin = strings.NewReader("print('cli')")
	out, err := cli.Output()
	require.NoError(t, err)
	r := e.wait(strings.TrimSpace(string(out)), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, "cli\n", r.Stdout)
}
