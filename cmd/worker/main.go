// Command worker pulls sandq jobs from Redis and runs them in pooled,
// hardened containers. It only wires packages together: configuration from
// flags and SANDQ_* environment variables, logging, metrics, signals.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

type config struct {
	redisAddr         string
	redisDB           int
	prefix            string
	queuePrefix       string
	resultTTL         time.Duration
	concurrency       int
	backend           string
	podmanURI         string
	imagePrefix       string
	ociRuntime        string
	minIdle           int
	maxPerPool        int
	maxJobs           int
	warm              string
	metricsAddr       string
	shutdownTimeout   time.Duration
	reconcileInterval time.Duration
	reconcileGrace    time.Duration
	pollInterval      time.Duration
	logLevel          string
	owner             string
	s3Endpoint        string
	s3AccessKey       string
	s3SecretKey       string
	s3Bucket          string
	s3Secure          bool
	artifactDir       string
	artifactPrefix    string
	urlExpiry         time.Duration
	maxArtifacts      int
	maxArtifactBytes  int64
	caps              string
	defaults          string
	policy            jobs.Policy
	mirrors           langs.Mirrors
	installCA         string
	installTimeout    time.Duration
	installMemoryMB   int
	installMaxMB      int
}

// env returns SANDQ_<name> or def: flags are defaulted from the
// environment, so a flag on the command line wins over both.
func env(name, def string) string {
	if v, ok := os.LookupEnv("SANDQ_" + name); ok {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(env(name, "")); err == nil {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(env(name, "")); err == nil {
		return v
	}
	return def
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&c.redisAddr, "redis", env("REDIS_ADDR", "127.0.0.1:6379"), "Redis address (SANDQ_REDIS_ADDR)")
	fs.IntVar(&c.redisDB, "redis-db", envInt("REDIS_DB", 0), "Redis database (SANDQ_REDIS_DB)")
	fs.StringVar(&c.prefix, "prefix", env("PREFIX", jobs.DefaultPrefix), "key prefix of results (SANDQ_PREFIX)")
	fs.StringVar(&c.queuePrefix, "queue-prefix", env("QUEUE_PREFIX", ""), "prefix of the asynq queue names (SANDQ_QUEUE_PREFIX)")
	fs.DurationVar(&c.resultTTL, "result-ttl", envDur("RESULT_TTL", jobs.DefaultResultTTL), "how long results are kept (SANDQ_RESULT_TTL)")
	fs.IntVar(&c.concurrency, "concurrency", envInt("CONCURRENCY", runtime.NumCPU()), "jobs run at once; default the number of CPUs (SANDQ_CONCURRENCY)")
	fs.StringVar(&c.backend, "backend", env("BACKEND", "docker"), "container engine: docker or podman (SANDQ_BACKEND)")
	fs.StringVar(&c.podmanURI, "podman-uri", env("PODMAN_URI", ""), "address of the podman system service, with --backend podman; default CONTAINER_HOST, else "+sandbox.DefaultPodmanURI+" (SANDQ_PODMAN_URI)")
	fs.StringVar(&c.imagePrefix, "image-prefix", env("IMAGE_PREFIX", "sandq/"), "language images are <prefix><lang>:latest (SANDQ_IMAGE_PREFIX)")
	fs.StringVar(&c.ociRuntime, "oci-runtime", env("OCI_RUNTIME", ""), "OCI runtime for sandboxes, e.g. runsc (SANDQ_OCI_RUNTIME)")
	fs.IntVar(&c.minIdle, "min-idle", envInt("MIN_IDLE", 1), "warm idle containers per pool key (SANDQ_MIN_IDLE)")
	fs.IntVar(&c.maxPerPool, "max-per-pool", envInt("MAX_PER_POOL", 0), "containers per pool key; 0 means --concurrency (SANDQ_MAX_PER_POOL)")
	fs.IntVar(&c.maxJobs, "max-jobs-per-container", envInt("MAX_JOBS_PER_CONTAINER", 500), "recycle a container after this many jobs (SANDQ_MAX_JOBS_PER_CONTAINER)")
	fs.StringVar(&c.warm, "warm", env("WARM", "python"), "comma-separated languages whose default pool is started at boot (SANDQ_WARM)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("METRICS_ADDR", "127.0.0.1:9464"), "address of /metrics and /healthz; empty disables (SANDQ_METRICS_ADDR)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", envDur("SHUTDOWN_TIMEOUT", 30*time.Second), "how long in-flight jobs may finish on SIGTERM before they are requeued (SANDQ_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.reconcileInterval, "reconcile-interval", envDur("RECONCILE_INTERVAL", time.Minute), "how often containers of dead workers are looked for (SANDQ_RECONCILE_INTERVAL)")
	fs.DurationVar(&c.reconcileGrace, "reconcile-grace", envDur("RECONCILE_GRACE", time.Minute), "age before another worker's stopped container is removed (SANDQ_RECONCILE_GRACE)")
	fs.DurationVar(&c.pollInterval, "poll-interval", envDur("POLL_INTERVAL", 10*time.Millisecond), "how often an idle worker checks its empty queues: shorter answers sooner, longer loads Redis less (SANDQ_POLL_INTERVAL)")
	fs.StringVar(&c.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (SANDQ_LOG_LEVEL)")
	fs.StringVar(&c.owner, "owner", env("OWNER", ""), "owner ID on this worker's containers; default host-pid-random (SANDQ_OWNER)")
	fs.StringVar(&c.s3Endpoint, "s3-endpoint", env("S3_ENDPOINT", ""), "S3-compatible artifact store host:port; empty uses --artifact-dir (SANDQ_S3_ENDPOINT)")
	fs.StringVar(&c.s3AccessKey, "s3-access-key", env("S3_ACCESS_KEY", ""), "S3 access key (SANDQ_S3_ACCESS_KEY)")
	fs.StringVar(&c.s3SecretKey, "s3-secret-key", env("S3_SECRET_KEY", ""), "S3 secret key (SANDQ_S3_SECRET_KEY)")
	fs.StringVar(&c.s3Bucket, "s3-bucket", env("S3_BUCKET", "sandq"), "S3 bucket, created if missing (SANDQ_S3_BUCKET)")
	fs.BoolVar(&c.s3Secure, "s3-secure", env("S3_SECURE", "") == "true", "use HTTPS for S3 (SANDQ_S3_SECURE=true)")
	fs.StringVar(&c.artifactDir, "artifact-dir", env("ARTIFACT_DIR", defaultArtifactDir()), "local artifact store when no S3 endpoint is set (SANDQ_ARTIFACT_DIR)")
	fs.StringVar(&c.artifactPrefix, "artifact-prefix", env("ARTIFACT_PREFIX", "sandq"), "artifact keys are <prefix>/<job id>/<name> (SANDQ_ARTIFACT_PREFIX)")
	fs.DurationVar(&c.urlExpiry, "artifact-url-expiry", envDur("ARTIFACT_URL_EXPIRY", 24*time.Hour), "lifetime of presigned artifact URLs (SANDQ_ARTIFACT_URL_EXPIRY)")
	fs.IntVar(&c.maxArtifacts, "max-artifacts", envInt("MAX_ARTIFACTS", 32), "files kept per job (SANDQ_MAX_ARTIFACTS)")
	fs.Int64Var(&c.maxArtifactBytes, "max-artifact-bytes", int64(envInt("MAX_ARTIFACT_BYTES", 32<<20)), "total artifact bytes kept per job (SANDQ_MAX_ARTIFACT_BYTES)")
	fs.StringVar(&c.caps, "caps", env("CAPS", ""), `operator caps as job limits JSON, e.g. '{"timeout_ms":60000,"memory_mb":1024}'; unset fields keep the built-in caps (SANDQ_CAPS)`)
	fs.StringVar(&c.defaults, "defaults", env("DEFAULTS", ""), `limits of a job that sets none, as job limits JSON (SANDQ_DEFAULTS)`)
	d := langs.DefaultMirrors
	fs.StringVar(&c.mirrors.PipIndexURL, "pip-index-url", env("PIP_INDEX_URL", d.PipIndexURL), "pip's package index for libraries (SANDQ_PIP_INDEX_URL)")
	fs.StringVar(&c.mirrors.NpmRegistry, "npm-registry", env("NPM_REGISTRY", d.NpmRegistry), "npm registry for libraries (SANDQ_NPM_REGISTRY)")
	fs.StringVar(&c.mirrors.GoProxy, "go-proxy", env("GO_PROXY", d.GoProxy), "GOPROXY for Go modules (SANDQ_GO_PROXY)")
	fs.StringVar(&c.mirrors.GoSumDB, "go-sumdb", env("GO_SUMDB", d.GoSumDB), "GOSUMDB for Go modules; off disables (SANDQ_GO_SUMDB)")
	fs.StringVar(&c.mirrors.CRAN, "cran-mirror", env("CRAN_MIRROR", d.CRAN), "CRAN repository for R packages (SANDQ_CRAN_MIRROR)")
	fs.StringVar(&c.mirrors.RubyGems, "rubygems-source", env("RUBYGEMS_SOURCE", d.RubyGems), "gem source for Ruby gems (SANDQ_RUBYGEMS_SOURCE)")
	fs.StringVar(&c.mirrors.Maven, "maven-repo", env("MAVEN_REPO", d.Maven), "Maven-layout repository for Java jars (SANDQ_MAVEN_REPO)")
	fs.StringVar(&c.installCA, "install-ca-bundle", env("INSTALL_CA_BUNDLE", defaultCABundle()), "PEM bundle that library installers trust; none: the images' own (SANDQ_INSTALL_CA_BUNDLE)")
	fs.DurationVar(&c.installTimeout, "install-timeout", envDur("INSTALL_TIMEOUT", 5*time.Minute), "limit of each library install command, at most 10m (SANDQ_INSTALL_TIMEOUT)")
	fs.IntVar(&c.installMemoryMB, "install-memory-mb", envInt("INSTALL_MEMORY_MB", 2048), "memory of the library install container (SANDQ_INSTALL_MEMORY_MB)")
	fs.IntVar(&c.installMaxMB, "install-max-mb", envInt("INSTALL_MAX_MB", 2048), "largest installed library set on disk (SANDQ_INSTALL_MAX_MB)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for flagName, dst := range map[string]*jobs.Limits{"--caps": &c.policy.MaxLimits, "--defaults": &c.policy.DefaultLimits} {
		raw := map[string]string{"--caps": c.caps, "--defaults": c.defaults}[flagName]
		if raw == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(dst); err != nil {
			return c, fmt.Errorf("%s: %w", flagName, err)
		}
	}
	if c.maxPerPool == 0 {
		c.maxPerPool = c.concurrency
	}
	switch {
	case c.concurrency < 1:
		return c, fmt.Errorf("--concurrency = %d, want >= 1", c.concurrency)
	case c.backend != "docker" && c.backend != "podman":
		return c, fmt.Errorf("--backend %q: supported backends are: docker, podman", c.backend)
	case c.installTimeout <= 0 || c.installTimeout > jobs.MaxInstallTimeout:
		return c, fmt.Errorf("--install-timeout = %s, want > 0 and <= %s", c.installTimeout, jobs.MaxInstallTimeout)
	case c.installMemoryMB < 64:
		return c, fmt.Errorf("--install-memory-mb = %d, want >= 64", c.installMemoryMB)
	case c.installMaxMB < 1:
		return c, fmt.Errorf("--install-max-mb = %d, want >= 1", c.installMaxMB)
	}
	if err := c.mirrors.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	level, err := zerolog.ParseLevel(cfg.logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: --log-level:", err)
		os.Exit(2)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	log := zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("component", "worker").Logger()
	if err := run(cfg, log); err != nil {
		log.Error().Err(err).Msg("worker stopped")
		os.Exit(1)
	}
}

func run(cfg config, log zerolog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, DB: cfg.redisDB})
	defer rdb.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := rdb.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis %s: %w", cfg.redisAddr, err)
	}
	store, err := jobs.NewStore(rdb, jobs.StoreConfig{Prefix: cfg.prefix, ResultTTL: cfg.resultTTL})
	if err != nil {
		return err
	}

	rt, err := openEngine(cfg, log)
	if err != nil {
		return err
	}
	defer rt.Close()
	pingCtx, cancel = context.WithTimeout(ctx, 10*time.Second)
	err = rt.Ping(pingCtx)
	cancel()
	if err != nil {
		return err
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{
		Runtime: rt, Owner: cfg.owner, MinIdle: cfg.minIdle, MaxTotal: cfg.maxPerPool,
		MaxJobs: cfg.maxJobs, OCIRuntime: cfg.ociRuntime,
		ReconcileInterval: cfg.reconcileInterval, ReconcileGrace: cfg.reconcileGrace, Logger: log,
	})
	if err != nil {
		return err
	}
	log = log.With().Str("owner", pool.Owner()).Logger()

	art, err := artifactStore(cfg)
	if err != nil {
		return err
	}
	install := jobs.InstallConfig{Mirrors: cfg.mirrors, Timeout: cfg.installTimeout,
		MemoryMB: int64(cfg.installMemoryMB), MaxMB: int64(cfg.installMaxMB)}
	if cfg.installCA != "" && cfg.installCA != "none" {
		if install.CABundle, err = os.ReadFile(cfg.installCA); err != nil {
			return fmt.Errorf("--install-ca-bundle: %w", err)
		}
	}
	metrics := newMetrics(pool)
	handler, err := jobs.NewHandler(jobs.HandlerConfig{
		Pool: pool, Store: store, ImagePrefix: cfg.imagePrefix, Worker: pool.Owner(),
		Logger: log, Observe: metrics.observe,
		Policy:    cfg.policy,
		Artifacts: art, ArtifactPrefix: cfg.artifactPrefix,
		MaxArtifacts: cfg.maxArtifacts, MaxArtifactBytes: cfg.maxArtifactBytes,
		Install: install,
	})
	if err != nil {
		return err
	}
	warmPools(pool, cfg, log)

	// Handlers run under base; it is canceled with ErrShutdown only after
	// asynq has stopped waiting for them, so a late handler knows its task
	// was requeued and writes no result.
	base, cancelBase := context.WithCancelCause(context.Background())
	defer cancelBase(jobs.ErrShutdown)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       cfg.concurrency,
		Queues:            jobs.ServerQueues(cfg.queuePrefix),
		BaseContext:       func() context.Context { return base },
		ShutdownTimeout:   cfg.shutdownTimeout,
		TaskCheckInterval: cfg.pollInterval,
		RetryDelayFunc:    retryDelay,
		IsFailure:         func(err error) bool { return !errors.Is(err, jobs.ErrShutdown) },
		Logger:            asynqLogger{log.With().Str("source", "asynq").Logger()},
		LogLevel:          asynqLevel(cfg.logLevel),
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			id, _ := asynq.GetTaskID(ctx)
			log.Debug().Str("job_id", id).Err(err).Msg("task attempt failed")
		}),
	})
	mux := asynq.NewServeMux()
	mux.Handle(jobs.TypeExec, handler)
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("start asynq server: %w", err)
	}

	var httpSrv *http.Server
	if cfg.metricsAddr != "" {
		httpSrv = serveHTTP(cfg.metricsAddr, metrics.registry, func(ctx context.Context) error {
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			return rt.Ping(ctx)
		}, log)
	}
	log.Info().Int("concurrency", cfg.concurrency).Str("redis", cfg.redisAddr).Str("metrics", cfg.metricsAddr).
		Str("artifacts", art.Name()).Msg("worker started")

	<-ctx.Done()
	log.Info().Msg("shutting down: no new jobs; in-flight jobs finish or are requeued")
	srv.Shutdown()
	cancelBase(jobs.ErrShutdown)
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if httpSrv != nil {
		_ = httpSrv.Shutdown(closeCtx)
	}
	if err := pool.Close(closeCtx); err != nil {
		return fmt.Errorf("remove containers: %w", err)
	}
	log.Info().Msg("worker stopped; containers removed")
	return nil
}

// engine is the container engine the worker runs sandboxes on.
type engine interface {
	sandbox.Runtime
	Ping(context.Context) error
	Close() error
}

// openEngine connects to the --backend engine.
func openEngine(cfg config, log zerolog.Logger) (engine, error) {
	if cfg.backend == "podman" {
		return sandbox.NewPodman(sandbox.PodmanConfig{URI: cfg.podmanURI, Logger: log})
	}
	return sandbox.NewDocker(sandbox.DockerConfig{Logger: log})
}

// artifactStore is S3 when an endpoint is configured, else a local
// directory.
func artifactStore(cfg config) (artifacts.Store, error) {
	if cfg.s3Endpoint == "" {
		return artifacts.NewLocal(cfg.artifactDir)
	}
	return artifacts.NewS3(artifacts.S3Config{
		Endpoint: cfg.s3Endpoint, AccessKey: cfg.s3AccessKey, SecretKey: cfg.s3SecretKey,
		Bucket: cfg.s3Bucket, Secure: cfg.s3Secure, URLExpiry: cfg.urlExpiry,
	})
}

func defaultArtifactDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sandq", "artifacts")
	}
	return filepath.Join(os.TempDir(), "sandq-artifacts")
}

// warmPools starts the default pools of the named languages, so the first
// jobs find warm containers.
func warmPools(pool *sandbox.Pool, cfg config, log zerolog.Logger) {
	lim, err := jobs.SandboxPolicy(cfg.policy).Effective(sandbox.Limits{})
	if err != nil {
		log.Error().Err(err).Msg("warm pools")
		return
	}
	for _, name := range strings.Split(cfg.warm, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		l, ok := langs.Lookup(name)
		if !ok {
			log.Warn().Str("lang", name).Msg("--warm: unknown language")
			continue
		}
		pool.Warm(sandbox.Spec{Image: l.Image(cfg.imagePrefix), Limits: lim.Container()})
	}
}

// retryDelay backs off exponentially from 1 s to 30 s. Only
// infrastructure faults are retried; user-code outcomes never are.
func retryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	return min(time.Second<<min(n, 5), 30*time.Second)
}

func serveHTTP(addr string, reg *prometheus.Registry, health func(context.Context) error, log zerolog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := health(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("addr", addr).Msg("metrics server")
		}
	}()
	return srv
}

// defaultCABundle is the system's CA bundle when there is one: library
// installers then trust what this host trusts (a TLS-intercepting proxy's
// CA included), whatever the images hold.
func defaultCABundle() string {
	const p = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "none"
}
