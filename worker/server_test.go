package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/store"
)

// The Server's start and shutdown order is tested through its seams: Run
// opens fakes of the asynq server, the pools, the sessions service, the
// metrics server and the owner store, which record their calls in order
// and panic on calls a test did not expect. What the real parts do is the
// e2e tests' (TestSIGTERMFinishesOrRequeues, TestSessionShutdown).

// recorder is the fakes' shared log of calls.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

type fakeQueue struct {
	start    func(asynq.Handler) error
	shutdown func()
}

func (f *fakeQueue) Start(h asynq.Handler) error {
	if f.start == nil {
		panic("fakeQueue: unexpected Start")
	}
	return f.start(h)
}

func (f *fakeQueue) Shutdown() {
	if f.shutdown == nil {
		panic("fakeQueue: unexpected Shutdown")
	}
	f.shutdown()
}

type fakePool struct {
	close func(ctx context.Context) error
}

func (f *fakePool) Close(ctx context.Context) error {
	if f.close == nil {
		panic("fakePool: unexpected Close")
	}
	return f.close(ctx)
}

type fakeSessions struct {
	register func(ctx context.Context) error
	run      func(ctx context.Context) error
}

func (f *fakeSessions) Register(ctx context.Context) error {
	if f.register == nil {
		panic("fakeSessions: unexpected Register")
	}
	return f.register(ctx)
}

func (f *fakeSessions) Run(ctx context.Context) error {
	if f.run == nil {
		panic("fakeSessions: unexpected Run")
	}
	return f.run(ctx)
}

type fakeHTTP struct {
	shutdown func(ctx context.Context) error
}

func (f *fakeHTTP) Shutdown(ctx context.Context) error {
	if f.shutdown == nil {
		panic("fakeHTTP: unexpected Shutdown")
	}
	return f.shutdown(ctx)
}

type fakeOwners struct {
	heartbeat func(ctx context.Context, owner string, ttl time.Duration) error
	ownerGone func(ctx context.Context, owner string) error
}

func (f *fakeOwners) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if f.heartbeat == nil {
		panic("fakeOwners: unexpected Heartbeat")
	}
	return f.heartbeat(ctx, owner, ttl)
}

func (f *fakeOwners) PublishWorkerStatus(context.Context, string, store.WorkerStatus, time.Duration) error {
	panic("fakeOwners: unexpected PublishWorkerStatus")
}

func (f *fakeOwners) OwnerGone(ctx context.Context, owner string) error {
	if f.ownerGone == nil {
		panic("fakeOwners: unexpected OwnerGone")
	}
	return f.ownerGone(ctx, owner)
}

var (
	_ queueServer    = (*fakeQueue)(nil)
	_ containerPool  = (*fakePool)(nil)
	_ sessionService = (*fakeSessions)(nil)
	_ httpServer     = (*fakeHTTP)(nil)
	_ ownerStore     = (*fakeOwners)(nil)
)

type serverBundle struct {
	srv *Server
	rec *recorder
	log *bytes.Buffer
	// parts are what the Server's open returns; a test changes them
	// before Run.
	parts   *parts
	openErr error
	// base is the handlers' context, as Run gave it to open.
	base context.Context
	// running is closed when the sessions service runs; loopsRunning
	// is done when both loops run.
	running      chan struct{}
	loopsRunning sync.WaitGroup
}

// setupServer returns a Server whose open gives fakes of every part, each
// recording its calls.
func setupServer(t *testing.T) *serverBundle {
	t.Helper()
	b := &serverBundle{rec: &recorder{}, log: &bytes.Buffer{}, running: make(chan struct{})}
	var err error
	b.srv, err = NewServer(ServerConfig{Redis: config.Redis{Addr: "redis.test:6379"}, Owner: "w-test",
		Logger: zerolog.New(b.log)})
	require.NoError(t, err)
	b.srv.open = func(_, base context.Context) (*parts, error) {
		b.base = base
		return b.parts, b.openErr
	}

	// detached checks that a cleanup step got a live context with a
	// deadline, though Run's own has ended.
	detached := func(ctx context.Context) {
		_, ok := ctx.Deadline()
		require.True(t, ok, "a cleanup context has a deadline")
		require.NoError(t, ctx.Err(), "a cleanup context is detached from Run's")
	}
	loop := func(ctx context.Context) {
		b.loopsRunning.Done()
		<-ctx.Done()
		b.rec.add("loop: stopped")
	}
	b.loopsRunning.Add(2)
	b.parts = &parts{
		owners: &fakeOwners{ownerGone: func(ctx context.Context, owner string) error {
			detached(ctx)
			b.rec.add("owner heartbeat dropped: %s", owner)
			return nil
		}},
		queue: &fakeQueue{
			start: func(asynq.Handler) error { b.rec.add("queue: start"); return nil },
			shutdown: func() {
				b.rec.add("queue: shutdown, handlers' context canceled by %v", context.Cause(b.base))
			},
		},
		jobPool: &fakePool{close: func(ctx context.Context) error {
			detached(ctx)
			b.rec.add("job containers removed")
			return nil
		}},
		sessPool: &fakePool{close: func(ctx context.Context) error {
			detached(ctx)
			b.rec.add("session containers removed")
			return nil
		}},
		sessions: &fakeSessions{
			register: func(context.Context) error { b.rec.add("sessions: register"); return nil },
			run: func(ctx context.Context) error {
				b.rec.add("sessions: run")
				close(b.running)
				<-ctx.Done()
				b.rec.add("sessions: drained, canceled by %v", context.Cause(ctx))
				return nil
			},
		},
		http: &fakeHTTP{shutdown: func(ctx context.Context) error {
			detached(ctx)
			b.rec.add("http: shutdown")
			return nil
		}},
		loops:     []func(context.Context){loop, loop},
		closers:   []func(){func() { b.rec.add("clients closed") }},
		artifacts: "local",
	}
	return b
}

// runUntilStarted runs the Server, ending its context once the sessions
// service and the loops run, and returns Run's error.
func (b *serverBundle) runUntilStarted(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-b.running
		b.loopsRunning.Wait()
		cancel()
	}()
	return b.srv.Run(ctx)
}

// messages are the messages the Server logged.
func (b *serverBundle) messages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(b.log.String()), "\n") {
		if line == "" {
			continue
		}
		var m struct{ Message string }
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m.Message)
	}
	return out
}

func TestServerRun(t *testing.T) {
	t.Parallel()

	t.Run("ShutdownOrder", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)

		require.NoError(t, b.runUntilStarted(t))
		want := []string{
			"queue: start",
			"sessions: register",
			"sessions: run",
			// asynq waits for the handlers while their context is live...
			"queue: shutdown, handlers' context canceled by <nil>",
			// ...then it is canceled, and the sessions drain.
			"sessions: drained, canceled by worker: shutting down",
			"loop: stopped",
			"loop: stopped",
			"http: shutdown",
			"session containers removed",
			"job containers removed",
			"owner heartbeat dropped: w-test",
			"clients closed",
		}
		if diff := cmp.Diff(want, b.rec.get()); diff != "" {
			t.Fatalf("calls (-want +got):\n%s", diff)
		}
		// The e2e tests wait for these lines.
		wantLog := []string{"worker started", "shutting down: no new jobs; in-flight jobs finish or are requeued", "worker stopped; containers removed"}
		if diff := cmp.Diff(wantLog, b.messages(t)); diff != "" {
			t.Fatalf("log (-want +got):\n%s", diff)
		}
	})

	t.Run("NoSessionsNoMetrics", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		b.parts.sessions, b.parts.sessPool, b.parts.http = nil, nil, nil
		close(b.running)

		require.NoError(t, b.runUntilStarted(t))
		want := []string{
			"queue: start",
			"queue: shutdown, handlers' context canceled by <nil>",
			"loop: stopped",
			"loop: stopped",
			"job containers removed",
			"owner heartbeat dropped: w-test",
			"clients closed",
		}
		if diff := cmp.Diff(want, b.rec.get()); diff != "" {
			t.Fatalf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("StartFails", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		b.parts.queue.(*fakeQueue).start = func(asynq.Handler) error {
			b.rec.add("queue: start")
			return errors.New("redis went away")
		}
		never := func(context.Context) { panic("a loop started though asynq did not") }
		b.parts.loops = []func(context.Context){never}
		b.parts.sessions = &fakeSessions{} // neither registered nor run

		err := b.srv.Run(context.Background())
		require.EqualError(t, err, "start asynq server: redis went away")
		want := []string{
			"queue: start",
			"queue: shutdown, handlers' context canceled by <nil>", // a no-op for asynq's
			"http: shutdown",
			"session containers removed",
			"job containers removed",
			"owner heartbeat dropped: w-test",
			"clients closed",
		}
		if diff := cmp.Diff(want, b.rec.get()); diff != "" {
			t.Fatalf("calls (-want +got):\n%s", diff)
		}
		require.NotContains(t, b.messages(t), "worker started")
	})

	t.Run("OpenFailsPartWay", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		// open stored the heartbeat and made the job pool, then failed:
		// what it opened is closed.
		b.parts = &parts{owners: b.parts.owners, jobPool: b.parts.jobPool, closers: b.parts.closers}
		b.openErr = errors.New("artifacts: no such bucket")

		err := b.srv.Run(context.Background())
		require.EqualError(t, err, "artifacts: no such bucket")
		want := []string{"job containers removed", "owner heartbeat dropped: w-test", "clients closed"}
		if diff := cmp.Diff(want, b.rec.get()); diff != "" {
			t.Fatalf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("FailedStepDoesNotSkipTheNext", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t)
		b.parts.sessPool = &fakePool{close: func(context.Context) error {
			b.rec.add("session containers: engine down")
			return errors.New("engine down")
		}}

		err := b.runUntilStarted(t)
		require.EqualError(t, err, "remove session containers: engine down")
		got := b.rec.get()
		require.Equal(t, []string{"session containers: engine down", "job containers removed", "owner heartbeat dropped: w-test", "clients closed"}, got[len(got)-4:])
		require.NotContains(t, b.messages(t), "worker stopped; containers removed")
	})
}

func TestNewServer(t *testing.T) {
	t.Parallel()

	redis := config.Redis{Addr: "127.0.0.1:6379"}
	srv, err := NewServer(ServerConfig{Redis: redis})
	require.NoError(t, err)
	require.NotEmpty(t, srv.Owner(), "an owner ID is generated")
	cfg := srv.cfg
	require.Equal(t, cfg.Concurrency, cfg.Pool.MaxTotal, "containers per pool key follow the concurrency")
	require.Equal(t, store.DefaultResultTTL, cfg.ArtifactTTL, "artifacts are kept as long as results")
	require.Equal(t, 30*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, 10*time.Minute, cfg.LibsGCInterval)
	require.Equal(t, "sandq/", cfg.Handler.ImagePrefix)

	srv, err = NewServer(ServerConfig{Redis: config.Redis{Addr: "r:6379", ResultTTL: time.Hour}, Owner: "w1", ArtifactTTL: -1})
	require.NoError(t, err)
	require.Equal(t, "w1", srv.Owner())
	require.Equal(t, time.Duration(-1), srv.cfg.ArtifactTTL, "negative keeps artifacts")

	for name, tt := range map[string]struct {
		cfg ServerConfig
		err string
	}{
		"NoRedis":         {ServerConfig{}, "worker: ServerConfig.Redis: --redis: no address"},
		"Concurrency":     {ServerConfig{Redis: redis, Concurrency: -1}, "worker: ServerConfig.Concurrency = -1, want >= 1"},
		"MaxSessions":     {ServerConfig{Redis: redis, MaxSessions: -2}, "worker: ServerConfig.MaxSessions = -2, want >= 0"},
		"ShutdownTimeout": {ServerConfig{Redis: redis, ShutdownTimeout: -time.Second}, "worker: ServerConfig.ShutdownTimeout = -1s, want >= 0"},
		"WarmSessions":    {ServerConfig{Redis: redis, WarmSessions: []string{"go"}}, `worker: ServerConfig.WarmSessions: "go" has no sessions`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := NewServer(tt.cfg)
			require.ErrorContains(t, err, tt.err)
		})
	}
}
