package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/jobs"
)

// These tests run `enqueue batch` and `enqueue eval` as processes against
// real worker processes. They are not parallel: they load the machine and
// measure it, and each already runs several jobs at once.

// dataDir is the shared benchmark data (../shared/data from the
// repository root). Tests skip, saying so, only when it is absent.
func dataDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "data")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("benchmark data not found at %s (../shared/data from the repository root)", dir)
	}
	return dir
}

// enqueueCmd returns the enqueue CLI on e's namespace.
func (e *env) enqueueCmd(args ...string) *exec.Cmd {
	base := append(e.redisFlags(), "--prefix", e.prefix, "--queue-prefix", e.queuePrefix)
	return exec.Command(bins.enqueue, append(base, args...)...)
}

// requireImage fails the test when the language's image is missing:
// `make images` builds them all.
func requireImage(t testing.TB, lang string) {
	t.Helper()
	img := "sandq/" + lang + ":latest"
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", img).CombinedOutput()
	require.NoError(t, err, "image %s is missing (make images builds it): %s", img, out)
}

// readLines returns the lines of path.
func readLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Acceptance 1: canonical solutions all pass and buggy ones all fail, per
// language, through the queue. A language whose image is missing fails.
//
// HumanEval's 164 Python problems run in full. Of each HumanEvalPack
// language, make test runs every eighth problem (21 of 164, a spread
// across the set) and the tasks the cases name; SANDQ_EVAL_EVERY sets the
// step (1: every problem, as `make humaneval-pack` runs them: about 20
// minutes on a slow 2-core machine, most of it compiling).
func TestEvalHumanEvalThroughTheQueue(t *testing.T) {
	data := dataDir(t)
	every := 8
	if v, ok := os.LookupEnv("SANDQ_EVAL_EVERY"); ok {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "SANDQ_EVAL_EVERY")
		require.Positive(t, n, "SANDQ_EVAL_EVERY")
		every = n
	}
	e := newEnv(t)
	for _, tt := range []struct {
		name, lang, problems, samples string
		// wantPassed lists the tasks expected to pass: nil means all of
		// them for canonical samples and none for buggy ones.
		wantPassed []string
		// unstable lists canonical tasks whose solution passes or fails
		// from run to run, each with the results its failure may have.
		unstable map[string][]string
	}{
		{name: "HumanEvalCanonical", lang: "python", problems: "humaneval/HumanEval.jsonl.gz", samples: "canonical"},
		{name: "PythonCanonical", lang: "python", problems: "humanevalpack/python.jsonl.gz", samples: "canonical"},
		{name: "PythonBuggy", lang: "python", problems: "humanevalpack/python.jsonl.gz", samples: "buggy"},
		// JavaScript/162 needs the npm package js-md5: its job lists it in
		// libraries, installed from the npm registry.
		{name: "JavaScriptCanonical", lang: "javascript", problems: "humanevalpack/js.jsonl.gz", samples: "canonical"},
		{name: "JavaScriptBuggy", lang: "javascript", problems: "humanevalpack/js.jsonl.gz", samples: "buggy"},
		{name: "JavaCanonical", lang: "java", problems: "humanevalpack/java.jsonl.gz", samples: "canonical"},
		{name: "JavaBuggy", lang: "java", problems: "humanevalpack/java.jsonl.gz", samples: "buggy"},
		{name: "CPPCanonical", lang: "cpp", problems: "humanevalpack/cpp.jsonl.gz", samples: "canonical"},
		// A dataset defect: CPP/23's test calls C's strlen, not the solution.
		{name: "CPPBuggy", lang: "cpp", problems: "humanevalpack/cpp.jsonl.gz", samples: "buggy", wantPassed: []string{"CPP/23"}},
		// A dataset defect: Go/95's solution returns as soon as two keys
		// agree, so its answer depends on Go's random map iteration order
		// ({"p", "a", 5} is true when 5 comes last): it passed 45 of 60
		// runs of the same job here.
		{name: "GoCanonical", lang: "go", problems: "humanevalpack/go.jsonl.gz", samples: "canonical",
			unstable: map[string][]string{"Go/95": {"failed: --- FAIL: TestCheckDictCase"}}},
		{name: "GoBuggy", lang: "go", problems: "humanevalpack/go.jsonl.gz", samples: "buggy"},
		// The rust image's prebuilt rand, regex and md5 crates, offline;
		// the set with rand 0.7, whose gen_range(low, high) Rust/32 and
		// Rust/50's tests call. A dataset defect: Rust/32's test draws
		// random polynomials (thread_rng, no seed) and its solution's
		// Newton iteration from 0 often never converges: it passed 23 of
		// 60 runs of the same job here (36 timed out, 1 failed its
		// assertion).
		{name: "RustCanonical", lang: "rust", problems: "humanevalpack/rust.jsonl.gz", samples: "canonical",
			unstable: map[string][]string{"Rust/32": {"timed out", "failed: assertion failed: poly(&coeffs, solution).abs() < 1e-3"}}},
		{name: "RustBuggy", lang: "rust", problems: "humanevalpack/rust.jsonl.gz", samples: "buggy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireImage(t, tt.lang)
			w := e.startWorker("--concurrency", "4", "--warm", tt.lang)
			defer func() {
				w.signal(syscall.SIGTERM)
				require.NoError(t, w.wait(time.Minute))
			}()
			problems, n := filepath.Join(data, tt.problems), 164
			if strings.HasPrefix(tt.problems, "humanevalpack/") && every > 1 {
				problems, n = everyNth(t, problems, every, append(slices.Collect(maps.Keys(tt.unstable)), tt.wantPassed...))
			}
			out := filepath.Join(t.TempDir(), "results.jsonl")
			start := time.Now()
			cmd := e.enqueueCmd("eval", "--problems", problems, "--samples", tt.samples,
				"--k", "1", "--json", "--out", out, "--progress", "plain")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("enqueue eval %s %s: %s\n%s", tt.problems, tt.samples, time.Since(start).Round(time.Millisecond), stderr.String())
			require.NoError(t, err, stderr.String())
			var sum eval.Summary
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())

			known := 0
			var passed, others []string
			for _, line := range readLines(t, out) {
				var r eval.SampleResult
				require.NoError(t, json.Unmarshal([]byte(line), &r))
				if r.Passed {
					passed = append(passed, r.TaskID)
				} else if whys, ok := tt.unstable[r.TaskID]; ok && tt.samples == "canonical" {
					require.True(t, slices.ContainsFunc(whys, func(why string) bool { return strings.HasPrefix(r.Result, why) }),
						"%s: %q is none of %q", r.TaskID, r.Result, whys)
					t.Logf("%s failed this time (its solution does not always pass): %s", r.TaskID, r.Result)
					known++
				} else if tt.samples == "canonical" {
					others = append(others, r.TaskID+": "+r.Result)
				}
			}
			t.Logf("%s %s: %d/%d passed, pass@1 %.4f, %d timed out, %d excluded", tt.lang, tt.samples, sum.Passed, sum.Samples, sum.PassAt["pass@1"], sum.TimedOut, sum.Excluded)
			require.Equal(t, n, sum.Samples)
			require.Zero(t, sum.Excluded, "infrastructure failures")
			switch {
			case tt.samples == "canonical" && tt.wantPassed == nil:
				require.Empty(t, others, "canonical solutions that did not pass")
				require.Equal(t, n-known, sum.Passed)
				require.InDelta(t, float64(sum.Passed)/float64(n), sum.PassAt["pass@1"], 1e-9)
			case tt.wantPassed == nil:
				require.Empty(t, passed, "buggy solutions that passed")
				require.InDelta(t, 0.0, sum.PassAt["pass@1"], 1e-9)
			default:
				require.ElementsMatch(t, tt.wantPassed, passed)
			}
		})
	}
}

// everyNth writes the problems of a problem file whose index is a
// multiple of every, and those whose task_id is in keep, to a .jsonl file
// (read and written as eval reads them), and returns its path and how many
// it holds.
func everyNth(t *testing.T, path string, every int, keep []string) (string, int) {
	t.Helper()
	ps, err := eval.LoadProblems(path)
	require.NoError(t, err)
	require.Len(t, ps.List, 164, "%s: problems", path)
	var b bytes.Buffer
	enc, n := json.NewEncoder(&b), 0
	for i, p := range ps.List {
		if i%every == 0 || slices.Contains(keep, p.TaskID) {
			require.NoError(t, enc.Encode(p))
			n++
		}
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gz"))
	require.NoError(t, os.WriteFile(out, b.Bytes(), 0o644))
	return out, n
}

// jobsDone counts the "job done" log lines per job ID in worker logs: one
// per job a worker ran to its final result.
var jobDoneRE = regexp.MustCompile(`"job_id":"([^"]+)"[^\n]*"message":"job done"`)

func jobsDone(ws ...*worker) map[string]int {
	m := map[string]int{}
	for _, w := range ws {
		for _, match := range jobDoneRE.FindAllStringSubmatch(w.logs(), -1) {
			m[match[1]]++
		}
	}
	return m
}

// waitJobsDone is jobsDone once the workers have logged n jobs' ends: a
// worker logs "job done" after it stores the result, so a reader of the
// results can be ahead of the log.
func waitJobsDone(t testing.TB, n int, ws ...*worker) map[string]int {
	t.Helper()
	require.Eventually(t, func() bool { return len(jobsDone(ws...)) >= n }, 30*time.Second, 50*time.Millisecond,
		"the workers log %d jobs done", n)
	return jobsDone(ws...)
}

// writeBatchInput writes n jobs that print their index, without IDs.
func writeBatchInput(t testing.TB, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"lang": "python", "code": "print(%d)", "tags": {"i": "%d"}}`+"\n", i, i)
	}
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// checkBatchResults reads a batch's --out and checks it holds exactly one
// succeeded result for each of the n jobs of writeBatchInput.
func checkBatchResults(t testing.TB, out string, n int) []jobs.Result {
	t.Helper()
	lines := readLines(t, out)
	require.Len(t, lines, n, "result lines")
	byID := map[string]bool{}
	byIndex := map[string]bool{}
	var results []jobs.Result
	for _, line := range lines {
		var r jobs.Result
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.False(t, byID[r.ID], "result of %s written twice", r.ID)
		byID[r.ID] = true
		require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.ID, r.Reason)
		require.Equal(t, r.Tags["i"]+"\n", r.Stdout)
		require.False(t, byIndex[r.Tags["i"]], "job %s twice", r.Tags["i"])
		byIndex[r.Tags["i"]] = true
		results = append(results, r)
	}
	require.Len(t, byIndex, n)
	return results
}

// lockedBuffer is a log written by one goroutine and read by others.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBatch starts `enqueue batch` with plain progress lines every 100 ms
// and, if stopAt > 0, sends it sig once a progress line reports at least
// stopAt results in --out (this run's and those written before). It returns the command's exit error on a
// channel, and its stderr.
func (e *env) startBatch(t testing.TB, in, out string, stopAt int, sig syscall.Signal) (<-chan error, *lockedBuffer) {
	t.Helper()
	cmd := e.enqueueCmd("batch", "--in", in, "--out", out, "--progress", "plain", "--progress-interval", "100ms")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	log := &lockedBuffer{}
	done := make(chan error, 1)
	progressRE := regexp.MustCompile(`^batch(?: \((\d+) done before\))?: (\d+)/\d+ done`)
	go func() {
		signaled := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := progressRE.FindStringSubmatch(sc.Text()); m != nil && stopAt > 0 && !signaled {
				before, _ := strconv.Atoi(m[1])
				if n, _ := strconv.Atoi(m[2]); before+n >= stopAt {
					signaled = true
					_ = cmd.Process.Signal(sig)
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		done <- cmd.Wait()
	}()
	return done, log
}

// Acceptance 3: a 2,000-job batch interrupted twice (SIGINT at about a
// third, SIGKILL at about two thirds) and rerun ends with exactly 2,000
// results, none twice, and every job ran exactly once: the workers' logs
// hold one "job done" per job ID, 2,000 in all.
func TestBatchInterruptedAndResumed(t *testing.T) {
	const n = 2000
	e := newEnv(t)
	w := e.startWorker("--concurrency", "4", "--min-idle", "4")
	in := writeBatchInput(t, n)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	start := time.Now()

	for _, stop := range []struct {
		sig syscall.Signal
		at  int
	}{{syscall.SIGINT, n / 3}, {syscall.SIGKILL, 2 * n / 3}} {
		done, log := e.startBatch(t, in, out, stop.at, stop.sig)
		err := <-done
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "interrupted by %v: %s", stop.sig, log)
		if stop.sig == syscall.SIGINT {
			require.Equal(t, 130, ee.ExitCode(), log.String())
			require.Contains(t, log.String(), "Run the same command again to resume")
		}
		got := len(readLines(t, out))
		t.Logf("after %v: %d results in --out (%s)", stop.sig, got, time.Since(start).Round(time.Millisecond))
		require.Less(t, got, n, "interrupted before the end")
	}

	done, log := e.startBatch(t, in, out, 0, 0)
	require.NoError(t, <-done, log.String())
	t.Logf("batch of %d with two interruptions: %s\n%s", n, time.Since(start).Round(time.Millisecond), log)
	checkBatchResults(t, out, n)

	// Every job ran once: the runs the worker logged are the 2,000 IDs,
	// each once. (Jobs enqueued by an interrupted run finished while no
	// one waited; the reruns collected them from Redis.)
	runs := waitJobsDone(t, n, w)
	require.Len(t, runs, n)
	for id, c := range runs {
		require.Equal(t, 1, c, "job %s ran %d times", id, c)
	}
	require.Contains(t, log.String(), "found final in Redis, not run again")
}

// Acceptance 4: 10,000 jobs, two worker processes at concurrency 4: 10,000
// results, none twice, each job run once, and no sandq container left
// once the workers stop. make test runs it short, 2,000 jobs (10,000 took
// 8.7 minutes on a slow 2-core machine); `make batch-soak` runs the
// 10,000. SANDQ_E2E_BATCH_JOBS sets the count.
func TestBatchTenThousandJobsTwoWorkers(t *testing.T) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("SANDQ_E2E_BATCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(t)
	w1 := e.startWorker("--concurrency", "4", "--min-idle", "4")
	w2 := e.startWorker("--concurrency", "4", "--min-idle", "4")
	in := writeBatchInput(t, n)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	start := time.Now()
	done, log := e.startBatch(t, in, out, 0, 0)
	require.NoError(t, <-done, log.String())
	wall := time.Since(start)
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	t.Logf("batch of %d jobs, 2 workers × 4: %s (%.1f jobs/s)\n%s", n, wall.Round(time.Millisecond), float64(n)/wall.Seconds(),
		strings.Join(lines[max(0, len(lines)-3):], "\n"))

	checkBatchResults(t, out, n)
	runs := waitJobsDone(t, n, w1, w2)
	require.Len(t, runs, n)
	for id, c := range runs {
		require.Equal(t, 1, c, "job %s ran %d times", id, c)
	}
	t.Logf("jobs per worker: %d and %d", len(jobsDone(w1)), len(jobsDone(w2)))

	for _, w := range []*worker{w1, w2} {
		w.signal(syscall.SIGTERM)
		require.NoError(t, w.wait(time.Minute))
		require.Empty(t, e.containers(w.owner), "worker %s left containers", w.owner)
	}
}
