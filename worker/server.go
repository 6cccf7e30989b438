package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/langs/session"
	"github.com/sandq/sandq/sandbox"
)

// ServerConfig configures a Server, the worker process. cmd/worker fills
// it from its flags; the zero value of every field but Redis's address
// is its default.
type ServerConfig struct {
	// Redis is where the queues, results and registries live: its
	// address, topology, credentials and namespace (Prefix, QueuePrefix,
	// ResultTTL), with config.Redis's defaults. Run makes its Redis
	// client from it and closes it when it returns. Addr is required
	// (cmd/worker's default is config.DefaultRedisAddr).
	Redis config.Redis

	// Concurrency is how many jobs run at once. Default
	// runtime.NumCPU().
	Concurrency int

	// Engine is the container engine Run opens (sandbox.Open). Default:
	// Docker, from the DOCKER_* environment. Run sets its Logger.
	Engine sandbox.Options

	// Owner is this worker's ID: the owner label of its containers, its
	// name in results and registries, the key of its heartbeat. Default
	// sandbox.NewOwnerID() (host-pid-random).
	Owner string

	// Pool configures the job containers' pool: MinIdle, MaxTotal,
	// MaxContainers, IdleTimeout, MaxJobs, PrestartHold, OCIRuntime,
	// ReconcileInterval, ReconcileGrace and PinCPUs, each with
	// sandbox.PoolConfig's default, except MaxTotal: default
	// Concurrency. Run sets Runtime, Owner, Alive, JobUIDs, Logger and
	// ObserveScrub. The session pool takes its IdleTimeout, OCIRuntime
	// and PinCPUs.
	Pool sandbox.PoolConfig

	// Warm names the languages whose default pool (WarmSpec) is started
	// at boot, so the first jobs find warm containers. An unknown name is
	// logged and skipped. Default none.
	Warm []string

	// Handler configures the job handler (see Config), with Config's
	// defaults. Run sets its Sandbox, Store, Worker (Owner), Logger,
	// Observe, ObservePhase (the metrics), EngineUp and Artifacts.
	Handler Config

	// Artifacts is the artifact store Run opens (artifacts.Open): S3 when
	// S3.Endpoint is set, else a local directory. Its presigned URLs
	// expire within ArtifactTTL. Default: artifacts.DefaultDir().
	Artifacts artifacts.Config
	// ArtifactTTL is how long artifacts are kept: a sweeper deletes the
	// older ones under Handler.ArtifactPrefix. Default Redis.ResultTTL
	// (or store.DefaultResultTTL); negative keeps them, with no sweeper.
	ArtifactTTL time.Duration
	// ArtifactSweepInterval is the time between sweeps. Default
	// artifacts.DefaultSweepInterval(ArtifactTTL): a quarter of it, at
	// most 10 min.
	ArtifactSweepInterval time.Duration

	// MaxSessions is how many stateful sessions this worker holds at
	// once, in a pool of their own beside Concurrency. Default 0: none,
	// and no session pool.
	MaxSessions int
	// WarmSessions names the languages whose session containers are
	// started at boot and kept, one each. Each must have sessions
	// (langs/session). Default none.
	WarmSessions []string

	// AllowUnpinnedOOM lets the worker start on an engine that cannot
	// grant CAP_SYS_RESOURCE, whose steps' OOM scores are raised but not
	// pinned (a job may lower its own to 0, the agent's). Default false:
	// such a worker refuses to start (docs/security.md).
	AllowUnpinnedOOM bool
	// SkipProbe starts no probe container at start (tests of the worker's
	// own plumbing, with fake engines). Default false.
	SkipProbe bool
	// ShutdownTimeout is how long in-flight jobs, and running session
	// cells, may finish when Run's context ends; jobs still running are
	// then requeued. Default 30 s.
	ShutdownTimeout time.Duration
	// PollInterval is how long an idle worker waits for a producer's
	// wake before it checks its empty queues anyway (store.DequeueGate):
	// the longest a task made pending by asynq itself (a retry) or whose
	// wake was lost waits for an idle worker. Default 100 ms.
	PollInterval time.Duration

	// MetricsAddr is where /metrics and /healthz are served. Default ""
	// (none).
	MetricsAddr string

	// LibsMaxBytes bounds the installed library sets on the engine
	// (LibsCollector.MaxBytes). Default 10 GiB.
	LibsMaxBytes int64
	// LibsMaxTenantBytes bounds one tenant's installed library sets
	// (LibsCollector.MaxTenantBytes). Default 4 GiB.
	LibsMaxTenantBytes int64
	// LibsMaxAge removes a library set no job used for this long
	// (LibsCollector.MaxAge). Default 7 days.
	LibsMaxAge time.Duration
	// LibsGCInterval is how often library sets past those bounds are
	// looked for, and environment images (EnvCollector). Default 10 min.
	LibsGCInterval time.Duration
	// EnvMaxAge removes an environment image no job used for this long
	// (EnvCollector.MaxAge). Default 7 days.
	EnvMaxAge time.Duration

	// PublishVersions reads each language image's toolchain version at
	// start and publishes it in Redis (PublishVersions). Default false.
	PublishVersions bool

	// Logger gets the worker's logs; its level sets asynq's. Default:
	// discard.
	Logger zerolog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their
// defaults.
func (c ServerConfig) WithDefaults() ServerConfig {
	c.Concurrency = cmp.Or(c.Concurrency, runtime.NumCPU())
	c.Owner = cmp.Or(c.Owner, sandbox.NewOwnerID())
	c.Pool.MaxTotal = cmp.Or(c.Pool.MaxTotal, c.Concurrency)
	c.Handler.ImagePrefix = cmp.Or(c.Handler.ImagePrefix, langs.DefaultImagePrefix)
	c.ArtifactTTL = cmp.Or(c.ArtifactTTL, c.Redis.ResultTTL, store.DefaultResultTTL)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 30*time.Second)
	c.LibsGCInterval = cmp.Or(c.LibsGCInterval, 10*time.Minute)
	return c
}

func (c ServerConfig) validate() error {
	if err := c.Redis.Check(); err != nil {
		return fmt.Errorf("worker: ServerConfig.Redis: %w", err)
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("worker: ServerConfig.Concurrency = %d, want >= 1", c.Concurrency)
	case c.MaxSessions < 0:
		return fmt.Errorf("worker: ServerConfig.MaxSessions = %d, want >= 0", c.MaxSessions)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("worker: ServerConfig.ShutdownTimeout = %s, want >= 0", c.ShutdownTimeout)
	case c.PollInterval < 0:
		return fmt.Errorf("worker: ServerConfig.PollInterval = %s, want >= 0", c.PollInterval)
	case c.LibsGCInterval < 0:
		return fmt.Errorf("worker: ServerConfig.LibsGCInterval = %s, want >= 0", c.LibsGCInterval)
	}
	for _, name := range c.WarmSessions {
		if err := CheckWarmSession(name); err != nil {
			return fmt.Errorf("worker: ServerConfig.WarmSessions: %w", err)
		}
	}
	return nil
}

// CheckWarmSession reports whether lang names a language with sessions,
// so its session containers can be kept warm.
func CheckWarmSession(lang string) error {
	_, known := langs.Lookup(lang)
	if _, has := session.For(lang); !known || !has {
		return fmt.Errorf("%q has no sessions (sessions: %s)", lang, strings.Join(session.Langs(), ", "))
	}
	return nil
}

// Job containers and session containers draw their uids from two ranges,
// so no two containers of the worker share one (RLIMIT_NPROC counts per
// uid).
var (
	jobUIDs     = [2]int{sandbox.DefaultJobUIDs[0], sandbox.DefaultJobUIDs[0] + 39_999}
	sessionUIDs = [2]int{sandbox.DefaultJobUIDs[0] + 40_000, sandbox.DefaultJobUIDs[1]}
)

// loopStopTimeout bounds the wait for the background loops to end at
// shutdown; each ends on its context, this only keeps a stuck one from
// holding the containers' removal.
const loopStopTimeout = 10 * time.Second

// Server is the worker process: the asynq server and the job handler, the
// job and session pools, the sessions service, the background loops and
// the metrics server, started and stopped in order by Run.
type Server struct {
	cfg ServerConfig
	// log is the Server's logger with the owner; the engine and the job
	// pool get cfg.Logger.
	log zerolog.Logger
	// open builds the parts Run starts (s.openParts; the order tests
	// give fakes). It returns what it opened even with an error, for Run
	// to close.
	open func(ctx, base context.Context) (*parts, error)
}

// NewServer checks cfg, with its defaults filled, and returns a Server.
// It contacts nothing: Run does.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With().Str("owner", cfg.Owner).Logger()}
	s.open = s.openParts
	return s, nil
}

// Owner returns the worker's owner ID (ServerConfig.Owner, or the one
// generated for it).
func (s *Server) Owner() string { return s.cfg.Owner }

// The seams of Run's start and shutdown, each declared with only the
// calls Run makes, so the order test fakes exactly them.
type (
	// queueServer is the asynq server.
	queueServer interface {
		Start(asynq.Handler) error
		Shutdown()
	}
	// containerPool is a sandbox.Pool at shutdown.
	containerPool interface {
		Close(ctx context.Context) error
	}
	// sessionService is the sessions service.
	sessionService interface {
		Register(ctx context.Context) error
		Run(ctx context.Context) error
	}
)

var (
	_ queueServer    = (*asynq.Server)(nil)
	_ containerPool  = (*sandbox.Pool)(nil)
	_ sessionService = (*Sessions)(nil)
)

// parts are what Run starts and stops. A nil part was not opened (or is
// not configured) and is skipped.
type parts struct {
	// owners is set once the first heartbeat is stored: shutdown drops
	// it.
	owners ownerStore
	queue  queueServer
	// gate holds the idle queue's dequeues until a wake.
	gate     *store.DequeueGate
	handler  asynq.Handler
	jobPool  containerPool
	sessPool containerPool
	sessions sessionService
	http     httpServer
	// loops are the background loops, each ending on its context.
	loops []func(context.Context)
	// closers release the clients open made (the engine's, Redis'), run
	// last, in reverse.
	closers []func()
	// artifacts names the artifact store, for the start log.
	artifacts string
}

// Run opens Redis and the container engine, starts the worker and serves
// until ctx ends, then shuts down and returns. It is called once. Its
// error is why the worker could not start or stop cleanly; a worker that
// started and stopped cleanly returns nil.
//
// Start: the first owner heartbeat is stored before any container is
// made; the pools, handler and asynq server are built; the metrics server
// listens before the worker says it has started; then asynq starts taking
// jobs, the background loops start, and the sessions service registers
// its slots and serves.
//
// Shutdown, in this order:
//
//  1. stop taking jobs: asynq's Shutdown, which waits up to
//     ShutdownTimeout for in-flight handlers and requeues the rest;
//  2. cancel the handlers' base context with ErrShutdown, so a late
//     handler knows its task was requeued and writes no result; the
//     sessions service, which runs under the same context, stops taking
//     commands;
//  3. wait for the sessions to drain: running cells finish (up to
//     ShutdownTimeout) and every session is closed with the reason;
//  4. stop the background loops (the heartbeat's renewal, cancel
//     watching, archive settling, library-set GC, artifact sweeps,
//     version publishing) and wait for them, at most 10 s;
//  5. stop the metrics and health server;
//  6. remove the session containers;
//  7. remove the job containers;
//  8. drop the owner heartbeat: the worker is gone.
//
// Steps 5 to 8 share a detached context of a minute. A step that fails
// does not skip the next ones; their errors are joined. A start that
// fails part way runs the same steps for what was started.
func (s *Server) Run(ctx context.Context) error {
	l := &lifecycle{s: s}
	l.base, l.cancelBase = context.WithCancelCause(context.Background())
	defer l.cancelBase(ErrShutdown)
	l.bg, l.stopBG = context.WithCancel(context.Background())
	defer l.stopBG()

	p, err := s.open(ctx, l.base)
	l.parts = cmp.Or(p, &parts{})
	if err == nil {
		err = l.start(ctx)
	}
	if err == nil {
		s.log.Info().Int("concurrency", s.cfg.Concurrency).Str("redis", s.cfg.Redis.Addr).Str("metrics", s.cfg.MetricsAddr).
			Str("artifacts", l.artifacts).Msg("worker started")
		<-ctx.Done()
		s.log.Info().Msg("shutting down: no new jobs; in-flight jobs finish or are requeued")
	}
	if serr := l.stop(ctx); serr != nil {
		return errors.Join(err, serr)
	}
	if err == nil {
		s.log.Info().Msg("worker stopped; containers removed")
	}
	return err
}

// lifecycle is one Run's state.
type lifecycle struct {
	s *Server
	*parts
	// base is the handlers' and the sessions' context.
	base       context.Context
	cancelBase context.CancelCauseFunc
	// bg is the background loops' context.
	bg     context.Context
	stopBG context.CancelFunc
	loopWG sync.WaitGroup
	// sessionsDone is closed when the sessions service has drained; nil
	// when it never ran.
	sessionsDone chan struct{}
}

// start starts taking jobs, the loops and the sessions service.
func (l *lifecycle) start(ctx context.Context) error {
	if err := l.queue.Start(l.handler); err != nil {
		return fmt.Errorf("start asynq server: %w", err)
	}
	for _, loop := range l.loops {
		l.loopWG.Go(func() { loop(l.bg) })
	}
	if l.sessions == nil {
		return nil
	}
	if err := l.sessions.Register(ctx); err != nil {
		return fmt.Errorf("register sessions: %w", err)
	}
	l.sessionsDone = make(chan struct{})
	go func() {
		defer close(l.sessionsDone)
		if err := l.sessions.Run(l.base); err != nil {
			l.s.log.Error().Err(err).Msg("sessions")
		}
	}()
	return nil
}

// stop shuts down in Run's order what start and open started.
func (l *lifecycle) stop(ctx context.Context) error {
	if l.gate != nil {
		l.gate.Close() // no new task; a held dequeue would delay asynq's stop
	}
	if l.queue != nil {
		l.queue.Shutdown()
	}
	l.cancelBase(ErrShutdown)
	if l.sessionsDone != nil {
		<-l.sessionsDone // cells finished (bounded), sessions closed with the reason
	}
	l.stopBG()
	loopsDone := make(chan struct{})
	go func() {
		l.loopWG.Wait()
		close(loopsDone)
	}()
	select {
	case <-loopsDone:
	case <-time.After(loopStopTimeout):
		l.s.log.Warn().Dur("waited", loopStopTimeout).Msg("background loops still running; removing the containers anyway")
	}

	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	if l.http != nil {
		_ = l.http.Shutdown(closeCtx)
	}
	if l.sessPool != nil {
		if err := l.sessPool.Close(closeCtx); err != nil {
			errs = append(errs, fmt.Errorf("remove session containers: %w", err))
		}
	}
	if l.jobPool != nil {
		if err := l.jobPool.Close(closeCtx); err != nil {
			errs = append(errs, fmt.Errorf("remove containers: %w", err))
		}
	}
	if l.owners != nil {
		_ = l.owners.OwnerGone(closeCtx, l.s.cfg.Owner)
	}
	for _, c := range slices.Backward(l.closers) {
		c()
	}
	return errors.Join(errs...)
}

// openParts builds the real parts: Redis, the engine, the first
// heartbeat, the pools, the handler, the asynq server, the sessions, the
// loops and the metrics server, in that order.
func (s *Server) openParts(ctx, base context.Context) (*parts, error) {
	cfg := s.cfg
	p := &parts{}

	rdb := cfg.Redis.Client()
	p.closers = append(p.closers, func() { _ = rdb.Close() })
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := rdb.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return p, fmt.Errorf("redis %s: %w", cfg.Redis.Addr, err)
	}
	st, err := store.New(rdb, cfg.Redis.StoreConfig())
	if err != nil {
		return p, err
	}
	// Idle, asynq's dequeues wait for a producer's wake (store.DequeueGate):
	// subscribed before asynq starts, so no wake is missed.
	wakes, err := st.SubscribeWake(ctx)
	if err != nil {
		return p, fmt.Errorf("worker: %w", err)
	}
	p.gate = store.NewDequeueGate(cfg.PollInterval)
	p.gate.Attach(rdb)
	p.loops = append(p.loops, func(ctx context.Context) { p.gate.Listen(ctx, wakes) })

	engine := cfg.Engine
	engine.Logger = cfg.Logger
	rt, err := sandbox.Open(ctx, engine)
	if err != nil {
		return p, err
	}
	p.closers = append(p.closers, func() { _ = rt.Close() })
	// This worker's containers carry its owner ID; its heartbeat in Redis
	// tells every reconciler on the engine to leave them alone.
	hb := &heartbeat{owners: st, owner: cfg.Owner, log: cfg.Logger}
	if err := hb.beat(ctx); err != nil {
		return p, err
	}
	p.owners = st
	p.loops = append(p.loops, hb.run)

	m := newMetrics()
	pc := cfg.Pool
	pc.Runtime, pc.Owner, pc.Alive, pc.JobUIDs, pc.Logger = rt, cfg.Owner, st.OwnerAlive, jobUIDs, cfg.Logger
	pc.ObserveScrub = func(d time.Duration, _ bool) { m.phase("scrub", d) }
	pool, err := sandbox.NewPool(pc)
	if err != nil {
		return p, err
	}
	p.jobPool = pool
	m.watchPool(pool)
	hb.status = func() store.WorkerStatus { return m.status(pool) }
	if !cfg.SkipProbe {
		if err := s.probe(ctx, pool); err != nil {
			return p, err
		}
	}

	ac := cfg.Artifacts
	ac.LimitURLExpiry(cfg.ArtifactTTL)
	art, err := artifacts.Open(ac)
	if err != nil {
		return p, err
	}
	p.artifacts = art.Name()
	cc := cfg.Redis.ClientConfig()
	cc.Redis, cc.RedisOptions = rdb, nil
	cl, err := client.New(cc)
	if err != nil {
		return p, fmt.Errorf("worker: %w", err)
	}
	libs := &LibsCollector{Volumes: rt, Store: st, MaxBytes: cfg.LibsMaxBytes, MaxTenantBytes: cfg.LibsMaxTenantBytes,
		MaxAge: cfg.LibsMaxAge, Forget: pool.ForgetLibs, Logger: s.log}
	hc := cfg.Handler
	hc.Install.TenantQuota = func(ctx context.Context, tenant, volume string) {
		if _, err := libs.TrimTenant(ctx, tenant, volume); err != nil {
			s.log.Warn().Err(err).Str("tenant", tenant).Msg("trim the tenant's library sets")
		}
	}
	hc.Sandbox, hc.Store, hc.Worker, hc.Logger, hc.Artifacts, hc.Lanes = pool, st, cfg.Owner, s.log, art, cl
	hc.Observe, hc.ObservePhase, hc.ObserveTenant, hc.EngineUp = m.observe, m.phase, m.tenant, rt.Ping
	handler, err := NewHandler(hc)
	if err != nil {
		return p, err
	}
	p.handler = handler
	for _, name := range cfg.Warm {
		spec, ok := WarmSpec(hc.Policy, name, hc.ImagePrefix)
		if !ok {
			s.log.Warn().Str("lang", name).Msg("--warm: unknown language")
			continue
		}
		pool.Warm(spec)
	}

	// Handlers run under base; Run cancels it with ErrShutdown only after
	// asynq has stopped waiting for them, so a late handler knows its task
	// was requeued and writes no result.
	p.queue = asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       cfg.Concurrency,
		Queues:            store.ServerQueues(cfg.Redis.QueuePrefix),
		BaseContext:       func() context.Context { return base },
		ShutdownTimeout:   cfg.ShutdownTimeout,
		TaskCheckInterval: asynqIdleSleep,
		RetryDelayFunc:    retryDelay,
		IsFailure:         func(err error) bool { return !errors.Is(err, ErrShutdown) },
		Logger:            asynqLogger{s.log.With().Str("source", "asynq").Logger()},
		LogLevel:          asynqLevel(cfg.Logger.GetLevel()),
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			id, _ := asynq.GetTaskID(ctx)
			s.log.Debug().Str("job_id", id).Err(err).Msg("task attempt failed")
		}),
	})

	p.loops = append(p.loops, handler.WatchCancels)
	if cfg.ArtifactTTL > 0 {
		p.loops = append(p.loops, artifactSweeper(art, hc.ArtifactPrefix, cfg.ArtifactTTL, cfg.ArtifactSweepInterval, s.log).Run)
	}
	p.loops = append(p.loops, func(ctx context.Context) { libs.Run(ctx, cfg.LibsGCInterval) })
	if _, err := pool.ListImages(context.Background(), map[string]string{sandbox.LabelEnvHash: "-"}); err == nil {
		envs := &EnvCollector{Images: pool, Store: st, ImagePrefix: hc.ImagePrefix, MaxAge: cfg.EnvMaxAge, Logger: s.log}
		p.loops = append(p.loops, func(ctx context.Context) { envs.Run(ctx, cfg.LibsGCInterval) })
	}

	p.loops = append(p.loops, (&laneSweeper{fleet: st, lanes: cl, owner: cfg.Owner, slots: cfg.Concurrency, log: s.log}).run)
	p.loops = append(p.loops, (&archiveSettler{client: cl, inspector: asynq.NewInspectorFromRedisClient(rdb),
		queuePrefix: cfg.Redis.QueuePrefix, log: s.log}).run)
	if cfg.PublishVersions {
		p.loops = append(p.loops, (&versionPublisher{sandbox: pool, store: st, policy: hc.Policy,
			imagePrefix: hc.ImagePrefix, worker: cfg.Owner, log: s.log}).run)
	}

	if cfg.MaxSessions > 0 {
		// Sessions hold their containers for minutes: a pool of their own
		// (with a uid range of its own), so they never starve the jobs.
		sessPool, err := sandbox.NewPool(sandbox.PoolConfig{
			Runtime: rt, Owner: cfg.Owner, MinIdle: 1, MaxTotal: cfg.MaxSessions + 1,
			MaxContainers: cfg.MaxSessions + 4, IdleTimeout: cfg.Pool.IdleTimeout, MaxJobs: 1,
			OCIRuntime: cfg.Pool.OCIRuntime, ReconcileInterval: -1, JobUIDs: sessionUIDs, Name: "session",
			PinCPUs: cfg.Pool.PinCPUs,
			// What the job pool's probe learnt: on an engine that refuses
			// the OOM pin, no session's start fails first for asking.
			NoOOMPin: !pool.PinsOOM(),
			Logger:   s.log.With().Str("pool", "sessions").Logger(),
		})
		if err != nil {
			return p, err
		}
		p.sessPool = sessPool
		sessions, err := NewSessions(SessionsConfig{Handler: handler, Pool: sessPool, Owner: cfg.Owner,
			Max: cfg.MaxSessions, DrainTimeout: cfg.ShutdownTimeout, Logger: s.log})
		if err != nil {
			return p, err
		}
		for _, name := range cfg.WarmSessions {
			spec, _ := WarmSpec(hc.Policy, name, hc.ImagePrefix) // validate checked the name
			sessPool.Warm(spec)
		}
		p.sessions = sessions
	}

	if cfg.MetricsAddr != "" {
		// Listening before the worker says it started: a scrape right
		// after "worker started" finds the port open.
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return p, fmt.Errorf("--metrics-addr: %w", err)
		}
		p.http = serveHTTP(ln, m.registry, func(ctx context.Context) error {
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			return rt.Ping(ctx)
		}, s.log)
	}
	return p, nil
}

// asynqIdleSleep is asynq's TaskCheckInterval, its sleep after a round of
// empty dequeues: none to speak of, because an idle worker waits in the
// dequeue gate instead (store.DequeueGate, ServerConfig.PollInterval),
// where a wake ends the wait. asynq's own sleep would add a timer's
// granularity (about a millisecond here) to every job that arrives
// after a round has passed its queue.
const asynqIdleSleep = time.Nanosecond

// retryDelay backs off exponentially from 1 s to 30 s. Only
// infrastructure faults are retried; user-code outcomes never are.
func retryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	return min(time.Second<<min(n, 5), 30*time.Second)
}

// asynqLogger adapts zerolog to asynq's Logger interface.
type asynqLogger struct{ log zerolog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Error(args ...any) { l.log.Error().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Fatal(args ...any) { l.log.Fatal().Msg(fmt.Sprint(args...)) }

// asynqLevel is asynq's log level for a zerolog level: debug, warn and
// error as they are, anything else info.
func asynqLevel(l zerolog.Level) asynq.LogLevel {
	switch l {
	case zerolog.DebugLevel:
		return asynq.DebugLevel
	case zerolog.WarnLevel:
		return asynq.WarnLevel
	case zerolog.ErrorLevel:
		return asynq.ErrorLevel
	}
	return asynq.InfoLevel
}

// probe starts one container before any job and states the protections
// the engine applies; a missing one refuses the start (seccomp always,
// the OOM pin unless AllowUnpinnedOOM). A probe that cannot start for
// another reason (no image of its language yet) is logged and the pool
// checks each container as it starts.
func (s *Server) probe(ctx context.Context, pool *sandbox.Pool) error {
	lang := "python"
	if len(s.cfg.Warm) > 0 {
		lang = s.cfg.Warm[0]
	}
	spec, ok := WarmSpec(s.cfg.Handler.Policy, lang, s.cfg.Handler.ImagePrefix)
	if !ok {
		spec, _ = WarmSpec(s.cfg.Handler.Policy, "python", s.cfg.Handler.ImagePrefix)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got, err := pool.Probe(pctx, spec)
	switch {
	case errors.Is(err, sandbox.ErrNoSeccomp):
		return fmt.Errorf("worker: %w", err)
	case err != nil:
		s.log.Warn().Err(err).Str("image", spec.Image).Msg("probe container did not start: protections are checked as containers start")
		return nil
	}
	s.log.Info().Bool("seccomp", got.Seccomp).Bool("oom_pinned", got.OOMPinned).Str("image", spec.Image).Msg("protections in force")
	if !got.OOMPinned {
		if !s.cfg.AllowUnpinnedOOM {
			return errors.New("worker: the engine cannot grant CAP_SYS_RESOURCE, so steps' OOM scores cannot be pinned (a job could lower its own to the agent's); start with --allow-unpinned-oom to run so (docs/security.md)")
		}
		s.log.Warn().Msg("--allow-unpinned-oom: steps' OOM scores are raised but not pinned")
	}
	return nil
}
