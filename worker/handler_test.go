package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// These tests drive the handler's decisions through its one seam, the
// Sandbox, with the real Redis behind the result store and a real local
// artifact store. The fake sandbox panics on any call a test did not
// expect.

type fakeSandbox struct {
	run     func(ctx context.Context, spec sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error)
	install func(ctx context.Context, req sandbox.InstallRequest) (sandbox.InstallResult, error)
	imageID func(ctx context.Context, image string) (string, error)

	mu    sync.Mutex
	specs []sandbox.Spec
}

func (f *fakeSandbox) Run(ctx context.Context, spec sandbox.Spec, req *agent.RunRequest, _ ...sandbox.RunOption) (agent.RunResult, error) {
	if f.run == nil {
		panic("fakeSandbox: unexpected Run")
	}
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	f.mu.Unlock()
	return f.run(ctx, spec, req)
}

// RunSeq runs fn's requests through the fake's run, each as a Run.
func (f *fakeSandbox) RunSeq(ctx context.Context, spec sandbox.Spec, fn func(run sandbox.RunFunc) error, _ ...sandbox.RunOption) error {
	return fn(func(ctx context.Context, req *agent.RunRequest) (agent.RunResult, error) {
		return f.Run(ctx, spec, req)
	})
}

func (f *fakeSandbox) Install(ctx context.Context, req sandbox.InstallRequest) (sandbox.InstallResult, error) {
	if f.install == nil {
		panic("fakeSandbox: unexpected Install")
	}
	return f.install(ctx, req)
}

func (f *fakeSandbox) ImageID(ctx context.Context, image string) (string, error) {
	if f.imageID == nil {
		panic("fakeSandbox: unexpected ImageID")
	}
	return f.imageID(ctx, image)
}

type handlerBundle struct {
	ns      *jobstest.Namespace
	sb      *fakeSandbox
	h       *Handler
	store   *store.Store
	observe chan jobs.Result
}

func setupHandler(t *testing.T, mod func(*Config)) *handlerBundle {
	t.Helper()
	ns := jobstest.NewNamespace(t, "worker")
	art, err := artifacts.NewLocal(t.TempDir())
	require.NoError(t, err)
	b := &handlerBundle{ns: ns, sb: &fakeSandbox{}, store: ns.Store, observe: make(chan jobs.Result, 16)}
	cfg := Config{
		Sandbox: b.sb, Store: ns.Store, Worker: "test-worker", Artifacts: art,
		UploadAttempts: 1, Observe: func(r jobs.Result) { b.observe <- r },
	}
	if mod != nil {
		mod(&cfg)
	}
	b.h, err = NewHandler(cfg)
	require.NoError(t, err)
	return b
}

// task encodes j as the client would, with a fresh ID; its limits are
// left for the worker to fill, as a producer leaves them.
func task(t *testing.T, j jobs.Job) (*asynq.Task, attempt) {
	t.Helper()
	if j.ID == "" {
		j.ID = jobs.NewID()
	}
	tk, _ := store.NewTask(j)
	return tk, attempt{id: j.ID, retry: 0, maxRetry: 3}
}

func (b *handlerBundle) result(t *testing.T, id string) jobs.Result {
	t.Helper()
	r, err := b.store.Get(context.Background(), id)
	require.NoError(t, err)
	return r
}

// step is an agent step result with exit code 0 unless changed.
func step(name string, mods ...func(*agent.StepResult)) agent.StepResult {
	st := agent.StepResult{Name: name, Started: true, WallNs: int64(5 * time.Millisecond)}
	for _, m := range mods {
		m(&st)
	}
	return st
}

func ran(steps ...agent.StepResult) func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
	return func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
		return agent.RunResult{Steps: steps}, nil
	}
}

// TestStatusMapping: every outcome the agent reports becomes the job's
// status and reason; none of them is an error or a retry.
func TestStatusMapping(t *testing.T) {
	t.Parallel()
	exit := func(code int) func(*agent.StepResult) {
		return func(s *agent.StepResult) { s.ExitCode = code }
	}
	signal := func(sig int) func(*agent.StepResult) {
		return func(s *agent.StepResult) { s.ExitCode, s.Signal = -1, sig }
	}
	for _, tt := range []struct {
		name       string
		lang       string
		out        agent.RunResult
		wantStatus jobs.Status
		wantReason string
	}{
		{name: "Succeeded", out: agent.RunResult{Steps: []agent.StepResult{step("run")}}, wantStatus: jobs.StatusSucceeded},
		{name: "ExitCode", out: agent.RunResult{Steps: []agent.StepResult{step("run", exit(3))}},
			wantStatus: jobs.StatusFailed, wantReason: "exit status 3"},
		{name: "Signal", out: agent.RunResult{Steps: []agent.StepResult{step("run", signal(11))}},
			wantStatus: jobs.StatusFailed, wantReason: "killed by SIGSEGV"},
		{name: "DidNotStart", out: agent.RunResult{Steps: []agent.StepResult{{Name: "run", ExitCode: -1, Error: "cannot run python3: not found in PATH"}}},
			wantStatus: jobs.StatusFailed, wantReason: "cannot run python3: not found in PATH"},
		{name: "Timeout", out: agent.RunResult{Steps: []agent.StepResult{step("run", signal(9), func(s *agent.StepResult) { s.TimedOut = true })}},
			wantStatus: jobs.StatusTimeout, wantReason: "wall-clock limit of 10s exceeded; every process was killed"},
		{name: "OOM", out: agent.RunResult{Steps: []agent.StepResult{step("run", signal(9), func(s *agent.StepResult) { s.OOMKilled = true })}},
			wantStatus: jobs.StatusOOM, wantReason: "killed by the OOM killer (memory limit 256 MiB)"},
		{name: "OOMOfAChildOnly", out: agent.RunResult{Steps: []agent.StepResult{step("run", func(s *agent.StepResult) { s.OOMKilled = true })}},
			wantStatus: jobs.StatusSucceeded},
		{name: "OutputLimit", out: agent.RunResult{Steps: []agent.StepResult{step("run", func(s *agent.StepResult) {
			s.Stdout = agent.Output{Head: []byte("a"), Tail: []byte("z"), Total: 1 << 21, Truncated: true}
		})}}, wantStatus: jobs.StatusOutputLimit, wantReason: "output exceeded 1048576 bytes per stream; head and tail kept"},
		{name: "BadInputFiles", out: agent.RunResult{FilesError: `file "x": no space left on device`},
			wantStatus: jobs.StatusRejected, wantReason: `input files: file "x": no space left on device`},
		{name: "CompileError", lang: "c", out: agent.RunResult{Steps: []agent.StepResult{step("compile", exit(1))}},
			wantStatus: jobs.StatusCompileError, wantReason: "compilation failed"},
		{name: "CompileTimeout", lang: "c", out: agent.RunResult{Steps: []agent.StepResult{step("compile", signal(9), func(s *agent.StepResult) { s.TimedOut = true })}},
			wantStatus: jobs.StatusTimeout, wantReason: "compilation timed out"},
		{name: "CompileOOM", lang: "cpp", out: agent.RunResult{Steps: []agent.StepResult{step("compile", signal(9), func(s *agent.StepResult) { s.OOMKilled = true })}},
			wantStatus: jobs.StatusOOM, wantReason: "compiler killed: out of memory"},
		{name: "CompiledThenFailed", lang: "c", out: agent.RunResult{Steps: []agent.StepResult{step("compile"), step("run", exit(2))}},
			wantStatus: jobs.StatusFailed, wantReason: "exit status 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupHandler(t, nil)
			b.sb.run = ran(tt.out.Steps...)
			if tt.out.FilesError != "" {
				b.sb.run = func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) { return tt.out, nil }
			}
			lang := tt.lang
			if lang == "" {
				lang = "python"
			}
			tk, a := task(t, jobs.Job{Lang: lang, Code: "x"})
			require.NoError(t, b.h.process(context.Background(), a, tk))
			r := b.result(t, a.id)
			require.Equal(t, tt.wantStatus, r.Status, r.Reason)
			require.Equal(t, tt.wantReason, r.Reason)
			require.Equal(t, "test-worker", r.Worker)
			require.Equal(t, r, <-b.observe, "Observe sees the stored result")
		})
	}
}

func TestHandlerDecisions(t *testing.T) {
	t.Parallel()

	t.Run("PoisonIsRejectedOnceNeverRun", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil) // the fake panics if anything runs
		id := jobs.NewID()
		err := b.h.process(context.Background(), attempt{id: id, maxRetry: 3}, asynq.NewTask(store.TypeExec, []byte("print(1)")))
		require.NoError(t, err, "the rejection is stored: the task is done (and deleted, not archived)")
		r := b.result(t, id)
		require.Equal(t, jobs.StatusRejected, r.Status)
		require.Contains(t, r.Reason, "not a JSON object")
	})

	t.Run("InvalidForTheWorkersPolicy", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, func(c *Config) { c.Policy.MaxLimits.TimeoutMS = 1000 })
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x", Limits: jobs.Limits{TimeoutMS: 5000}})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusRejected, r.Status)
		require.Contains(t, r.Reason, "limits.timeout_ms: 5000 ms exceeds the operator cap 1000 ms")
	})

	t.Run("CanceledBeforeStart", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		require.NoError(t, b.store.RequestCancel(context.Background(), a.id))
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusCanceled, r.Status)
		require.Equal(t, "canceled before it started", r.Reason)
	})

	t.Run("AlreadyFinalIsNotRunAgain", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		_, _, err := b.store.Put(context.Background(), jobs.Result{ID: a.id, Status: jobs.StatusSucceeded})
		require.NoError(t, err)
		require.NoError(t, b.h.process(context.Background(), a, tk))
	})

	t.Run("InfraFaultRetriedThenInternalError", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		engineDown := errors.New("engine: connection refused")
		b.sb.run = func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
			return agent.RunResult{}, engineDown
		}
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		err := b.h.process(context.Background(), a, tk)
		require.ErrorIs(t, err, engineDown)
		require.NotErrorIs(t, err, asynq.SkipRetry, "retried")
		require.Equal(t, jobs.StatusRunning, b.result(t, a.id).Status, "no final result before the last attempt")

		a.retry = a.maxRetry
		require.NoError(t, b.h.process(context.Background(), a, tk), "internal_error is stored: the task is done")
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusInternalError, r.Status)
		require.Equal(t, "infrastructure fault after 4 attempts: engine: connection refused", r.Reason)
		require.Equal(t, 4, r.Attempts)
	})

	t.Run("WhatTheJobDidToItsSandboxIsItsStatus", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			err    error
			status jobs.Status
			reason string
		}{
			{fmt.Errorf("%w: %w", sandbox.ErrSandboxOOM, sandbox.ErrAgentGone), jobs.StatusOOM, "the sandbox was killed by the OOM killer (memory limit 256 MiB)"},
			{sandbox.ErrAgentUnresponsive, jobs.StatusTimeout, "the sandbox stopped answering past the job's time limits; it was removed"},
		} {
			b := setupHandler(t, nil)
			b.sb.run = func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
				return agent.RunResult{}, tt.err
			}
			tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
			require.NoError(t, b.h.process(context.Background(), a, tk), "not retried")
			r := b.result(t, a.id)
			require.Equal(t, tt.status, r.Status)
			require.Equal(t, tt.reason, r.Reason)
			require.Equal(t, 1, r.Attempts)
		}
	})

	t.Run("PanicIsAnInfraFault", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		b.sb.run = func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
			panic("boom")
		}
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		a.retry = a.maxRetry
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusInternalError, r.Status)
		require.Contains(t, r.Reason, "worker: handler panic: boom")
		require.Contains(t, r.Reason, "goroutine", "with a stack")
	})

	t.Run("FailedResultWriteIsRetried", func(t *testing.T) {
		t.Parallel()
		// Every script after the first (the running result) fails: the
		// final result cannot be written.
		h, _ := handlerFailingScripts(t, func(i int) bool { return i >= 1 })
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		err := h.process(context.Background(), a, tk)
		require.ErrorContains(t, err, "worker: store final result")
		require.NotErrorIs(t, err, asynq.SkipRetry, "asynq retries the task rather than leave the job without a result")
	})

	t.Run("RunningResultWriteIsRetried", func(t *testing.T) {
		t.Parallel()
		// Redis gone for the first two scripts, as in a restart just as
		// the job starts: the running result is stored at the third try,
		// and the job runs in this attempt rather than cost it one.
		h, st := handlerFailingScripts(t, func(i int) bool { return i < 2 })
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		require.NoError(t, h.process(context.Background(), a, tk))
		r, err := st.Get(context.Background(), a.id)
		require.NoError(t, err)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, 1, r.Attempts)
	})

	t.Run("ShutdownRequeuesWithoutAResult", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		started := make(chan struct{})
		b.sb.run = func(ctx context.Context, _ sandbox.Spec, _ *agent.RunRequest) (agent.RunResult, error) {
			close(started)
			<-ctx.Done()
			return agent.RunResult{Steps: []agent.StepResult{step("run", func(s *agent.StepResult) { s.Canceled = true })}}, nil
		}
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() { <-started; cancel(ErrShutdown) }()
		require.ErrorIs(t, b.h.process(ctx, a, tk), ErrShutdown)
		require.Equal(t, jobs.StatusRunning, b.result(t, a.id).Status, "no final result: another worker runs it")
	})

	t.Run("CancelChannelKillsTheRun", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		go b.h.WatchCancels(ctx)
		started := make(chan struct{})
		b.sb.run = func(ctx context.Context, _ sandbox.Spec, _ *agent.RunRequest) (agent.RunResult, error) {
			close(started)
			<-ctx.Done() // the agent is told to cancel when the run's context ends
			require.ErrorIs(t, context.Cause(ctx), ErrCanceled)
			return agent.RunResult{Steps: []agent.StepResult{step("run", func(s *agent.StepResult) { s.Canceled = true })}}, nil
		}
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		done := make(chan error, 1)
		go func() { done <- b.h.process(context.Background(), a, tk) }()
		<-started
		// The subscription may not be up yet: publish until the run ends.
		deadline := time.After(30 * time.Second)
		for {
			require.NoError(t, b.store.RequestCancel(context.Background(), a.id))
			select {
			case err := <-done:
				require.NoError(t, err)
				r := b.result(t, a.id)
				require.Equal(t, jobs.StatusCanceled, r.Status)
				require.Equal(t, "canceled while running", r.Reason)
				return
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				t.Fatal("the cancel request did not end the run")
			}
		}
	})

	t.Run("OutputFilesNeedAStore", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, func(c *Config) { c.Artifacts = nil })
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x", OutputFiles: []string{"*.csv"}})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusRejected, r.Status)
		require.Equal(t, "output_files need an artifact store, and this worker has none", r.Reason)
	})

	t.Run("MissingInputKeyIsTheJobs", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x", Tenant: "acme", Files: []jobs.File{{Path: "in.csv", Key: "data/nope.csv"}}})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusRejected, r.Status)
		require.Equal(t, `input file "in.csv": no input "data/nope.csv" (object "sandq-inputs/tenants/acme/data/nope.csv") in the artifact store`, r.Reason)
	})

	t.Run("InputFilesHaveOneBudget", func(t *testing.T) {
		t.Parallel()
		// A job naming one 1 MiB object forty times (40 MiB) is past the
		// job's cap on input files (10 MiB), however small each file is.
		b := setupHandler(t, nil)
		key, err := artifacts.InputKey(artifacts.DefaultInputsPrefix, "acme", "data/mib.bin")
		require.NoError(t, err)
		mib := bytes.Repeat([]byte("x"), 1<<20)
		require.NoError(t, b.h.cfg.Artifacts.Put(context.Background(), key, bytes.NewReader(mib), int64(len(mib)), "application/octet-stream"))
		var files []jobs.File
		for i := range 40 {
			files = append(files, jobs.File{Path: fmt.Sprintf("in%d.bin", i), Key: "data/mib.bin"})
		}
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x", Tenant: "acme", Files: files})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		require.Equal(t, jobs.StatusRejected, r.Status)
		require.Contains(t, r.Reason, "the cap on a job's input files")
	})

	t.Run("RunRequest", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		var got *agent.RunRequest
		b.sb.run = func(_ context.Context, _ sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error) {
			got = req
			return agent.RunResult{Steps: []agent.StepResult{step("compile"), step("run")}}, nil
		}
		tk, a := task(t, jobs.Job{Lang: "c", Code: "int main(){}", Args: []string{"-x"}, Stdin: "in",
			Env: map[string]string{"K": "v"}, Files: []jobs.File{{Path: "d/f.txt", ContentB64: []byte("hi"), Mode: 0o600}},
			Limits: jobs.Limits{TimeoutMS: 2000}})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		require.Equal(t, []agent.File{{Path: "main.c", Data: []byte("int main(){}")}, {Path: "d/f.txt", Data: []byte("hi"), Mode: 0o600}}, got.Files)
		require.Len(t, got.Steps, 2)
		c, r := got.Steps[0], got.Steps[1]
		require.Equal(t, "compile", c.Name)
		require.True(t, c.StopOnFailure)
		require.Equal(t, 32*time.Second, c.Timeout, "a compile gets the run's budget plus 30 s")
		require.Equal(t, []string{"./main", "-x"}, r.Argv)
		require.Equal(t, []byte("in"), r.Stdin)
		require.Equal(t, 2*time.Second, r.Timeout)
		require.Contains(t, r.Env, "K=v")
		require.Contains(t, r.Env, "SANDQ_PLOTS_DIR="+PlotsDir)
		require.NotNil(t, got.Collect)
	})
}

// failScripts fails the scripts (EVAL, EVALSHA) whose index, counted
// from 0, fail selects: Redis gone for a moment.
type failScripts struct {
	mu   sync.Mutex
	n    int
	fail func(i int) bool
}

func (f *failScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f *failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			f.mu.Lock()
			fail := f.fail(f.n)
			f.n++
			f.mu.Unlock()
			if fail {
				err := fmt.Errorf("injected: redis went away")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// handlerFailingScripts is a handler whose store's Redis client fails the
// scripts fail selects; its sandbox runs every job successfully.
func handlerFailingScripts(t *testing.T, fail func(i int) bool) (*Handler, *store.Store) {
	t.Helper()
	ns := jobstest.NewNamespace(t, "worker")
	rdb := redis.NewClient(&redis.Options{Addr: ns.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(&failScripts{fail: fail})
	st, err := store.New(rdb, store.Config{Prefix: ns.Prefix})
	require.NoError(t, err)
	h, err := NewHandler(Config{Sandbox: &fakeSandbox{run: ran(step("run"))}, Store: st})
	require.NoError(t, err)
	return h, st
}

// TestWarmSpecIsTheDefaultJobsSpec: for every language, the pool `--warm`
// starts is the one that language's default job asks for, so warm
// containers are used.
func TestWarmSpecIsTheDefaultJobsSpec(t *testing.T) {
	t.Parallel()
	for _, policy := range []jobs.Policy{{}, {DefaultLimits: jobs.Limits{MemoryMB: 128, TimeoutMS: 3000}}} {
		b := setupHandler(t, func(c *Config) { c.Policy = policy })
		b.sb.run = func(_ context.Context, _ sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error) {
			steps := make([]agent.StepResult, len(req.Steps))
			for i, s := range req.Steps {
				steps[i] = step(s.Name)
			}
			return agent.RunResult{Steps: steps}, nil
		}
		for _, l := range langs.All() {
			tk, a := task(t, jobs.Job{Lang: l.Name, Code: "x"})
			require.NoError(t, b.h.process(context.Background(), a, tk))
			want, ok := WarmSpec(policy, l.Name, "")
			require.True(t, ok)
			b.sb.mu.Lock()
			got := b.sb.specs[len(b.sb.specs)-1]
			b.sb.mu.Unlock()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: the warm pool is not the default job's (-warm +job):\n%s", l.Name, diff)
			}
		}
	}
}

// TestResultSizeCap: a result whose streams would pass the cap keeps each
// moved stream's head and references an "output" artifact holding the
// whole stream, byte-exact; the stored JSON stays within the cap. Without
// an artifact store the streams are cut and the result says so.
func TestResultSizeCap(t *testing.T) {
	t.Parallel()
	binary := make([]byte, 3<<20)
	for i := range binary {
		binary[i] = byte(i*7 + i>>9) // not UTF-8: carried as base64
	}
	text := bytes.Repeat([]byte("ünïcode line\n"), 100_000) // 1.5 MB of UTF-8
	run := ran(step("compile", func(s *agent.StepResult) { s.Stderr = agent.Output{Head: text, Total: int64(len(text))} }),
		step("run", func(s *agent.StepResult) {
			s.Stdout = agent.Output{Head: binary, Total: int64(len(binary))}
			s.Stderr = agent.Output{Head: []byte("small"), Total: 5}
		}))
	const limit = MinMaxResultBytes

	t.Run("MovedToTheArtifactStore", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, func(c *Config) { c.MaxResultBytes = limit })
		b.sb.run = run
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		raw, err := b.store.Get(context.Background(), a.id)
		require.NoError(t, err)
		stored, err := jobs.EncodeJSON(raw)
		require.NoError(t, err)
		require.LessOrEqual(t, len(stored), limit)

		r := raw
		require.Equal(t, jobs.StatusSucceeded, r.Status)
		require.Equal(t, ".sandq/stdout", r.StdoutArtifact)
		require.Equal(t, ".sandq/compile.stderr", r.Compile.StderrArtifact)
		require.Empty(t, r.StderrArtifact, "a small stream stays inline")
		require.Equal(t, "small", r.Stderr)
		head, err := r.StdoutBytes()
		require.NoError(t, err)
		require.Equal(t, binary[:len(head)], head)
		require.Greater(t, len(head), 4000)
		require.True(t, utf8.ValidString(r.Compile.Stderr), "a text head is not cut inside a character")
		require.True(t, strings.HasPrefix(string(text), r.Compile.Stderr))

		byName := map[string]jobs.Artifact{}
		for _, art := range r.Artifacts {
			byName[art.Name] = art
		}
		for name, want := range map[string][]byte{".sandq/stdout": binary, ".sandq/compile.stderr": text} {
			art, ok := byName[name]
			require.True(t, ok, name)
			require.Equal(t, "output", art.Kind)
			require.Equal(t, int64(len(want)), art.Size)
			rc, err := b.h.cfg.Artifacts.Get(context.Background(), art.Key)
			require.NoError(t, err)
			got, err := io.ReadAll(rc)
			rc.Close()
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "%s is stored byte-exact", name)
		}
	})

	t.Run("NoStoreCutsAndSaysSo", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, func(c *Config) { c.MaxResultBytes = limit; c.Artifacts = nil })
		b.sb.run = run
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x"})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		r := b.result(t, a.id)
		stored, err := jobs.EncodeJSON(r)
		require.NoError(t, err)
		require.LessOrEqual(t, len(stored), limit)
		require.True(t, r.StdoutTruncated)
		require.Empty(t, r.StdoutArtifact)
		require.Len(t, r.ArtifactErrors, 2)
		require.Contains(t, r.ArtifactErrors[0], "result over the 262144-byte cap and the stream could not be stored (this worker has no artifact store)")
	})

	t.Run("CapBelowMinimumRefused", func(t *testing.T) {
		t.Parallel()
		ns := jobstest.NewNamespace(t, "worker")
		_, err := NewHandler(Config{Sandbox: &fakeSandbox{}, Store: ns.Store, MaxResultBytes: 1000})
		require.ErrorContains(t, err, "below the minimum")
	})
}

// TestEngineDownHoldsTheJob: a job that starts while the engine does not
// answer waits for it and then runs (no attempt spent); one that waits
// past EngineWait is an infrastructure fault.
func TestEngineDownHoldsTheJob(t *testing.T) {
	t.Parallel()
	var upAt atomic.Int64
	upAt.Store(time.Now().Add(700 * time.Millisecond).UnixNano())
	b := setupHandler(t, func(c *Config) {
		c.EngineWait = 5 * time.Second
		c.EngineUp = func(context.Context) error {
			if time.Now().UnixNano() < upAt.Load() {
				return errors.New("engine down")
			}
			return nil
		}
	})
	b.sb.run = ran(step("run"))
	b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:x", nil }
	tk, a := task(t, jobs.Job{Lang: "python", Code: "print(1)"})
	start := time.Now()
	require.NoError(t, b.h.process(context.Background(), a, tk))
	require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "held until the engine answered")
	r := b.result(t, a.id)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, 1, r.Attempts)

	upAt.Store(time.Now().Add(time.Hour).UnixNano())
	b.h.cfg.EngineWait = 300 * time.Millisecond
	time.Sleep(engineFresh) // the last answer no longer vouches for the engine
	tk, a = task(t, jobs.Job{Lang: "python", Code: "print(2)"})
	err := b.h.process(context.Background(), a, tk)
	require.ErrorContains(t, err, "did not answer for 300ms", "a retry: attempts are left")
}

// TestEngineAnswerVouchesForAWhile: jobs back to back ask the engine once
// in engineFresh, not each; after an infrastructure fault the next job
// asks again, and one that then finds the engine down is held.
func TestEngineAnswerVouchesForAWhile(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	var down atomic.Bool
	b := setupHandler(t, func(c *Config) {
		c.EngineWait = 300 * time.Millisecond
		c.EngineUp = func(context.Context) error {
			asked.Add(1)
			if down.Load() {
				return errors.New("engine down")
			}
			return nil
		}
	})
	b.sb.run = ran(step("run"))
	b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:x", nil }
	run := func(code string) error {
		tk, a := task(t, jobs.Job{Lang: "python", Code: code})
		return b.h.process(context.Background(), a, tk)
	}
	start := time.Now()
	for i := range 5 {
		require.NoError(t, run(fmt.Sprintf("print(%d)", i)))
	}
	// One answer vouches for the jobs after it: one ask per window the
	// five jobs spanned (one, unless the machine stalled), not five.
	windows := 1 + int(time.Since(start)/engineFresh)
	require.LessOrEqual(t, int(asked.Load()), min(windows, 4), "asked %d times for 5 jobs", asked.Load())
	n := asked.Load()
	time.Sleep(engineFresh)
	require.NoError(t, run("print('later')"))
	require.Equal(t, n+1, asked.Load(), "an old answer does not vouch")

	// A fault: the next job asks, finds the engine down, and is held.
	n = asked.Load()
	b.sb.run = func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
		return agent.RunResult{}, errors.New("the engine went away")
	}
	b.h.engineOK.Store(time.Now().UnixNano()) // an answer this moment, however slowly the test got here
	require.Error(t, run("print('fault')"))
	require.Equal(t, n, asked.Load(), "asked nothing: the answer was fresh")
	down.Store(true)
	err := run("print('held')")
	require.ErrorContains(t, err, "did not answer for 300ms", "held, then a retry")
	require.Greater(t, asked.Load(), n, "asked after the fault")
}

// TestObserveTenant: a job's tenant and queue wait (from its queued
// Result's admission) are reported when it starts, and the tenant again
// when it ends, the job running between the two.
func TestObserveTenant(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	b := setupHandler(t, func(c *Config) {
		c.ObserveTenant = func(tenant string, wait time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case wait < 0:
				seen = append(seen, tenant+" ended")
			case wait >= 2*time.Second && wait < time.Minute:
				seen = append(seen, tenant+" waited")
			default:
				seen = append(seen, fmt.Sprintf("%s waited %s", tenant, wait))
			}
		}
	})
	b.sb.run = func(ctx context.Context, spec sandbox.Spec, req *agent.RunRequest) (agent.RunResult, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, "ran")
		return ran(step("run"))(ctx, spec, req)
	}
	b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:x", nil }
	j := jobs.Job{ID: jobs.NewID(), Lang: "python", Code: "print(1)", Tenant: "acme"}
	// Admitted two seconds ago, as a producer's claim records it.
	claim := b.store.Admit(context.Background(), store.Claimed{Tenant: "acme", Queue: jobs.QueueDefault,
		Result: jobs.Result{ID: j.ID, Status: jobs.StatusQueued, Tenant: "acme", EnqueuedAt: time.Now().Add(-2 * time.Second)}})
	require.NoError(t, claim.Err)
	tk, a := task(t, j)
	require.NoError(t, b.h.process(context.Background(), a, tk))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"acme waited", "ran", "acme ended"}, seen)
}

// TestObservePhase: a job's phases are reported to ObservePhase.
func TestObservePhase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	b := setupHandler(t, func(c *Config) {
		c.ObservePhase = func(phase string, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			seen[phase]++
		}
	})
	b.sb.run = ran(step("run"))
	b.sb.imageID = func(context.Context, string) (string, error) { return "sha256:x", nil }
	tk, a := task(t, jobs.Job{Lang: "python", Code: "print(1)"})
	require.NoError(t, b.h.process(context.Background(), a, tk))
	mu.Lock()
	defer mu.Unlock()
	for _, phase := range []string{"start", "plan", "run", "store_result"} {
		require.Equal(t, 1, seen[phase], "phase %s in %v", phase, seen)
	}
}
