package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/miniotest"
	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/jobs"
)

// The chaos suite: a batch on two workers while one fault hits the fleet,
// a fault per scenario; after each, every job must have exactly one final
// result, succeeded (0 lost), none run to completion twice or written
// twice (0 duplicate), and no container of the fleet may be left (0
// leaked). `make test` runs it short (SANDQ_CHAOS_JOBS=200 jobs per
// scenario, a 5 s MinIO outage); `make chaos` runs it in full (2,000 jobs,
// 30 s) and prints the figures, ending with the line
// "chaos: N faults, 0 lost, 0 duplicate, 0 leaked".

// chaosFigures are one scenario's counts.
type chaosFigures struct {
	fault                       string
	jobs, lost, dup, leaked     int
	retried, batchRuns, workers int
	wall                        time.Duration
}

func (f chaosFigures) String() string {
	return fmt.Sprintf("chaos: %-18s %d jobs, %d lost, %d duplicate, %d leaked; %d retried after the fault, %d batch run(s), %s",
		f.fault, f.jobs, f.lost, f.dup, f.leaked, f.retried, f.batchRuns, f.wall.Round(100*time.Millisecond))
}

func chaosSize() (int, time.Duration) {
	n, outage := 200, 5*time.Second
	if v, err := strconv.Atoi(os.Getenv("SANDQ_CHAOS_JOBS")); err == nil && v > 0 {
		n = v
	}
	if d, err := time.ParseDuration(os.Getenv("SANDQ_CHAOS_OUTAGE")); err == nil && d > 0 {
		outage = d
	}
	return n, outage
}

// TestChaos is not parallel: it restarts the engine, which no other test
// may see (see TestEngineStoppedMidJob).
func TestChaos(t *testing.T) {
	n, outage := chaosSize()
	workerArgs := []string{"--concurrency", "2", "--reconcile-interval", "2s", "--reconcile-grace", "3s"}
	var all []chaosFigures
	scenario := func(name string, run func(t *testing.T) chaosFigures) {
		t.Run(name, func(t *testing.T) {
			f := run(t)
			f.fault = name
			fmt.Println(f)
			t.Log(f)
			all = append(all, f)
		})
	}

	scenario("worker-sigkill", func(t *testing.T) chaosFigures {
		e := newEnv(t)
		w1, w2 := e.startWorker(workerArgs...), e.startWorker(workerArgs...)
		return e.chaosBatch(t, n, false, []*worker{w1, w2}, func() { w1.signal(syscall.SIGKILL) })
	})
	scenario("redis-restart", func(t *testing.T) chaosFigures {
		r := startRedis(t)
		e := newEnvAt(t, r.addr())
		ws := []*worker{e.startWorker(workerArgs...), e.startWorker(workerArgs...)}
		return e.chaosBatch(t, n, false, ws, r.restart)
	})
	scenario("dockerd-restart", func(t *testing.T) chaosFigures {
		e := newEnv(t)
		ws := []*worker{e.startWorker(workerArgs...), e.startWorker(workerArgs...)}
		t.Cleanup(func() { restartEngine(t) })
		return e.chaosBatch(t, n, false, ws, func() {
			require.NoError(t, exec.Command("pkill", "-TERM", "-x", "dockerd").Run(), "stop dockerd")
			restartEngine(t)
		})
	})
	scenario("minio-outage", func(t *testing.T) chaosFigures {
		e := newEnv(t)
		m := miniotest.Start(t)
		s3 := append([]string{"--s3-endpoint", m.Endpoint, "--s3-access-key", m.AccessKey, "--s3-secret-key", m.SecretKey,
			"--s3-bucket", "artifacts", "--artifact-prefix", e.prefix}, workerArgs...)
		ws := []*worker{e.startWorker(s3...), e.startWorker(s3...)}
		return e.chaosBatch(t, n, true, ws, func() {
			m.Stop()
			time.Sleep(outage)
			m.Restart()
		})
	})
	scenario("sentinel-failover", func(t *testing.T) chaosFigures {
		s := redistest.StartSentinel(t)
		e := newEnvWith(t, config.Redis{Addr: strings.Join(s.SentinelAddrs(), ","), MasterName: s.MasterName})
		ws := []*worker{e.startWorker(workerArgs...), e.startWorker(workerArgs...)}
		return e.chaosBatch(t, n, false, ws, func() { s.Failover(t) })
	})

	var lost, dup, leaked int
	for _, f := range all {
		lost, dup, leaked = lost+f.lost, dup+f.dup, leaked+f.leaked
	}
	line := fmt.Sprintf("chaos: %d faults, %d lost, %d duplicate, %d leaked", len(all), lost, dup, leaked)
	fmt.Println(line)
	t.Log(line)
	require.NotEmpty(t, all, "no scenario ran")
}

// chaosBatch runs an n-job batch on e's workers, calls fault once a third
// of it is done, resumes the batch if the fault stopped it, and counts.
// With artifacts, each job writes an output file the workers store.
func (e *env) chaosBatch(t *testing.T, n int, artifacts bool, ws []*worker, fault func()) chaosFigures {
	in := filepath.Join(t.TempDir(), "jobs.jsonl")
	var b strings.Builder
	for i := range n {
		if artifacts {
			fmt.Fprintf(&b, `{"lang": "python", "code": "open('o.txt','w').write('%d')\nprint(%d)", "output_files": ["o.txt"], "tags": {"i": "%d"}}`+"\n", i, i, i)
		} else {
			fmt.Fprintf(&b, `{"lang": "python", "code": "print(%d)", "tags": {"i": "%d"}}`+"\n", i, i)
		}
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o644))
	out := filepath.Join(t.TempDir(), "results.jsonl")
	start := time.Now()
	f := chaosFigures{jobs: n, workers: len(ws), batchRuns: 1}
	done, log := e.startBatch(t, in, out, 0, 0)
	require.Eventually(t, func() bool { return progressDone(log.String()) >= n/3 }, 10*time.Minute, 20*time.Millisecond,
		"a third of the batch before the fault:\n%s", log)
	faultAt := time.Now()
	fault()
	t.Logf("fault done in %s", time.Since(faultAt).Round(time.Millisecond))
	for err := <-done; err != nil; err = <-done {
		require.Less(t, f.batchRuns, 5, "the batch did not complete in 5 runs: %v\n%s", err, log)
		t.Logf("batch run %d ended with %v; resuming", f.batchRuns, err)
		f.batchRuns++
		done, log = e.startBatch(t, in, out, 0, 0)
	}
	f.wall = time.Since(start)

	// Lost: a job without a succeeded result. Duplicate: a result line
	// written twice, or a job run to completion twice.
	byIndex := map[string]int{}
	for _, line := range readLines(t, out) {
		var r jobs.Result
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		byIndex[r.Tags["i"]]++
		if byIndex[r.Tags["i"]] > 1 {
			f.dup++
			continue
		}
		if r.Status != jobs.StatusSucceeded || r.Stdout != r.Tags["i"]+"\n" {
			t.Errorf("job %s (%s): %s %s: %q", r.Tags["i"], r.ID, r.Status, r.Reason, r.Stdout)
			f.lost++
			continue
		}
		if artifacts && len(r.Artifacts) != 1 {
			t.Errorf("job %s (%s): artifacts %v, errors %v", r.Tags["i"], r.ID, r.Artifacts, r.ArtifactErrors)
			f.lost++
			continue
		}
		if r.Attempts > 1 {
			f.retried++
		}
	}
	f.lost += n - len(byIndex)
	for _, c := range jobsDone(ws...) {
		if c > 1 {
			f.dup += c - 1
		}
	}

	// Leaked: the fleet's containers once its workers stopped: a killed
	// worker's are removed by the others' reconcilers, the others' own at
	// their shutdown.
	var alive []*worker
	for _, w := range ws {
		select {
		case <-w.done:
		default:
			alive = append(alive, w)
		}
	}
	for _, w := range ws {
		if !slicesContains(alive, w) {
			require.Eventually(t, func() bool { return len(e.containers(w.owner)) == 0 }, time.Minute, 200*time.Millisecond,
				"the reconciler removes the dead worker %s's containers", w.owner)
		}
	}
	for _, w := range alive {
		w.signal(syscall.SIGTERM)
		require.NoError(t, w.wait(2*time.Minute))
	}
	for _, w := range ws {
		f.leaked += len(e.containers(w.owner))
	}
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.dup, "duplicate")
	require.Zero(t, f.leaked, "leaked")
	return f
}

func slicesContains(ws []*worker, w *worker) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// restartEngine waits for a stopped dockerd to be gone (it may still be
// stopping containers) and starts it again with scripts/setup.sh.
func restartEngine(t *testing.T) {
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
