// Command worker pulls sandq jobs from Redis and runs them in pooled,
// hardened containers. It only parses its flags and SANDQ_* environment
// variables into a worker.ServerConfig and runs the worker.Server until
// SIGTERM or SIGINT; `worker libs list|rm` manages the installed library
// sets on the engine.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	cfgpkg "github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/internal/tracing"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
	"github.com/sandq/sandq/worker"
)

type config struct {
	redis             cfgpkg.Redis
	concurrency       int
	engine            sandbox.Options
	imagePrefix       string
	ociRuntime        string
	allowUnpinnedOOM  bool
	minIdle           int
	maxPerPool        int
	maxSessions       int
	warmSessions      string
	maxContainers     int
	idleTimeout       time.Duration
	maxJobs           int
	prestartHold      time.Duration
	warm              string
	metricsAddr       string
	shutdownTimeout   time.Duration
	reconcileInterval time.Duration
	reconcileGrace    time.Duration
	engineWait        time.Duration
	pollInterval      time.Duration
	logLevel          string
	owner             string
	artifacts         artifacts.Config
	artifactPrefix    string
	inputsPrefix      string
	maxResultBytes    int
	streamAll         bool
	streamTTL         time.Duration
	maxArtifacts      int
	noPrestart        bool
	noPinCPUs         bool
	uploadAttempts    int
	maxArtifactBytes  int64
	artifactTTL       time.Duration
	artifactSweep     time.Duration
	limits            cfgpkg.Limits
	policy            jobs.Policy
	mirrors           langs.Mirrors
	installCA         string
	installTimeout    time.Duration
	installMemoryMB   int
	installCPUs       float64
	installAllowHosts []string
	installMaxMB      int
	publishVersions   bool
	libsMaxTotalMB    int64
	libsMaxTenantMB   int64
	libsMaxAge        time.Duration
	libsGCInterval    time.Duration
	envMaxAge         time.Duration
	compileCacheMB    int64
}

// parseFlags parses the worker's command line. getenv supplies the SANDQ_*
// variables: a flag given wins over its variable, the variable over the
// default.
func parseFlags(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	fs.SortFlags = false
	c.redis.Register(fs, "how long results are kept")
	env := func(name, v string) { cfgpkg.Env(fs, name, v) }
	fs.IntVar(&c.concurrency, "concurrency", runtime.NumCPU(), "jobs run at once; default the number of CPUs")
	env("concurrency", "SANDQ_CONCURRENCY")
	fs.StringVar(&c.engine.Backend, "backend", "docker", "container engine: "+strings.Join(sandbox.Backends, " or "))
	env("backend", "SANDQ_BACKEND")
	fs.StringVar(&c.engine.PodmanURI, "podman-uri", "", "address of the podman system service, with --backend podman; default CONTAINER_HOST, else "+sandbox.DefaultPodmanURI)
	env("podman-uri", "SANDQ_PODMAN_URI")
	fs.StringVar(&c.imagePrefix, "image-prefix", langs.DefaultImagePrefix, "language images are <prefix><lang>:latest")
	env("image-prefix", "SANDQ_IMAGE_PREFIX")
	fs.StringVar(&c.ociRuntime, "oci-runtime", "", "OCI runtime for sandboxes, e.g. runsc")
	env("oci-runtime", "SANDQ_OCI_RUNTIME")
	fs.BoolVar(&c.allowUnpinnedOOM, "allow-unpinned-oom", false, "start on an engine that cannot grant CAP_SYS_RESOURCE (steps' OOM scores raised, not pinned)")
	env("allow-unpinned-oom", "SANDQ_ALLOW_UNPINNED_OOM")
	fs.IntVar(&c.minIdle, "min-idle", 1, "warm idle containers per pool key")
	env("min-idle", "SANDQ_MIN_IDLE")
	fs.IntVar(&c.maxPerPool, "max-per-pool", 0, "containers per pool key; 0 means --concurrency")
	env("max-per-pool", "SANDQ_MAX_PER_POOL")
	fs.IntVar(&c.maxContainers, "max-containers", 0, "containers of this worker over every pool key, installs included; 0 means 2 × --max-per-pool + 2")
	env("max-containers", "SANDQ_MAX_CONTAINERS")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "an idle container unused this long is removed (a --warm pool keeps --min-idle)")
	env("idle-timeout", "SANDQ_IDLE_TIMEOUT")
	fs.IntVar(&c.maxJobs, "max-jobs-per-container", 500, "recycle a container after this many jobs")
	env("max-jobs-per-container", "SANDQ_MAX_JOBS_PER_CONTAINER")
	fs.DurationVar(&c.prestartHold, "prestart-hold", agent.DefaultPrestartHold, "how long an idle container keeps the interpreter it started for its next job (Python's fork server ~3 MB, Node.js ~16 MB); past it the next job starts cold; 0 keeps it")
	env("prestart-hold", "SANDQ_PRESTART_HOLD")
	fs.StringVar(&c.warm, "warm", "python", "comma-separated languages whose default pool is started at boot")
	env("warm", "SANDQ_WARM")
	fs.IntVar(&c.maxSessions, "max-sessions", 8, "stateful sessions this worker holds at once, apart from --concurrency; 0 takes none")
	env("max-sessions", "SANDQ_MAX_SESSIONS")
	fs.StringVar(&c.warmSessions, "warm-sessions", "", "comma-separated languages whose session containers are started at boot and kept (one each), so a session starts at once; after a session of a kind, one is kept warm anyway")
	env("warm-sessions", "SANDQ_WARM_SESSIONS")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "127.0.0.1:9464", "address of /metrics and /healthz; empty disables")
	env("metrics-addr", "SANDQ_METRICS_ADDR")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight jobs may finish on SIGTERM before they are requeued")
	env("shutdown-timeout", "SANDQ_SHUTDOWN_TIMEOUT")
	fs.DurationVar(&c.reconcileInterval, "reconcile-interval", time.Minute, "how often containers of dead workers are looked for")
	env("reconcile-interval", "SANDQ_RECONCILE_INTERVAL")
	fs.DurationVar(&c.reconcileGrace, "reconcile-grace", time.Minute, "age before another worker's stopped container is removed")
	env("reconcile-grace", "SANDQ_RECONCILE_GRACE")
	fs.DurationVar(&c.engineWait, "engine-wait", 2*time.Minute, "how long a job that starts while the container engine does not answer waits for it (holding its task) before failing as an infrastructure fault")
	env("engine-wait", "SANDQ_ENGINE_WAIT")
	fs.DurationVar(&c.pollInterval, "poll-interval", 100*time.Millisecond, "how long an idle worker waits for a producer's wake before checking its empty queues anyway: the longest a retried task, or one whose wake was lost, waits; shorter loads Redis more")
	env("poll-interval", "SANDQ_POLL_INTERVAL")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	env("log-level", "SANDQ_LOG_LEVEL")
	fs.StringVar(&c.owner, "owner", "", "owner ID on this worker's containers; default host-pid-random")
	env("owner", "SANDQ_OWNER")
	c.artifacts.RegisterFlags(fs)
	fs.StringVar(&c.artifactPrefix, "artifact-prefix", "sandq", "artifact keys are <prefix>/<job id>/<name>")
	env("artifact-prefix", "SANDQ_ARTIFACT_PREFIX")
	fs.StringVar(&c.inputsPrefix, "inputs-prefix", artifacts.DefaultInputsPrefix, "input files by key are <prefix>/tenants/<tenant>/<key>, or <prefix>/shared/<key> for jobs without a tenant; may not overlap --artifact-prefix")
	env("inputs-prefix", "SANDQ_INPUTS_PREFIX")
	fs.IntVar(&c.maxResultBytes, "max-result-bytes", worker.DefaultMaxResultBytes, "largest result stored in Redis; output streams that would pass it move to the artifact store (at least 262144)")
	env("max-result-bytes", "SANDQ_MAX_RESULT_BYTES")
	fs.BoolVar(&c.streamAll, "stream-all", false, "stream every job's output live to Redis, not only the jobs that ask (\"stream\": true)")
	env("stream-all", "SANDQ_STREAM_ALL")
	fs.DurationVar(&c.streamTTL, "stream-ttl", store.DefaultStreamTTL, "how long a job's live output stays in Redis after its last write")
	env("stream-ttl", "SANDQ_STREAM_TTL")
	fs.IntVar(&c.maxArtifacts, "max-artifacts", 32, "files kept per job")
	env("max-artifacts", "SANDQ_MAX_ARTIFACTS")
	fs.IntVar(&c.uploadAttempts, "upload-attempts", 16, "tries of an artifact upload (backoff from 500 ms, capped at 5 s: 16 ride out about a minute of store outage)")
	env("upload-attempts", "SANDQ_UPLOAD_ATTEMPTS")
	fs.BoolVar(&c.noPinCPUs, "no-pin-cpus", false, "do not pin each container of at most one CPU to one of this host's CPUs (pinning keeps the latency tail of many busy containers at the host's; turn it off when the engine is on another host)")
	env("no-pin-cpus", "SANDQ_NO_PIN_CPUS")
	fs.BoolVar(&c.noPrestart, "no-prestart", false, "start every job's interpreter cold (by default a Python container starts the next job's interpreter while it waits)")
	env("no-prestart", "SANDQ_NO_PRESTART")
	fs.Int64Var(&c.maxArtifactBytes, "max-artifact-bytes", 32<<20, "total artifact bytes kept per job")
	env("max-artifact-bytes", "SANDQ_MAX_ARTIFACT_BYTES")
	fs.DurationVar(&c.artifactTTL, "artifact-ttl", 0, "artifacts older than this are deleted; 0 means --result-ttl, negative keeps them")
	env("artifact-ttl", "SANDQ_ARTIFACT_TTL")
	fs.DurationVar(&c.artifactSweep, "artifact-sweep-interval", 0, "time between artifact sweeps; 0 means a quarter of --artifact-ttl, at most 10m")
	env("artifact-sweep-interval", "SANDQ_ARTIFACT_SWEEP_INTERVAL")
	c.limits.Register(fs, "")
	d := langs.DefaultMirrors
	fs.StringVar(&c.mirrors.PipIndexURL, "pip-index-url", d.PipIndexURL, "pip's package index for libraries")
	env("pip-index-url", "SANDQ_PIP_INDEX_URL")
	fs.StringVar(&c.mirrors.NpmRegistry, "npm-registry", d.NpmRegistry, "npm registry for libraries")
	env("npm-registry", "SANDQ_NPM_REGISTRY")
	fs.StringVar(&c.mirrors.GoProxy, "go-proxy", d.GoProxy, "GOPROXY for Go modules")
	env("go-proxy", "SANDQ_GO_PROXY")
	fs.StringVar(&c.mirrors.GoSumDB, "go-sumdb", d.GoSumDB, "GOSUMDB for Go modules; off disables")
	env("go-sumdb", "SANDQ_GO_SUMDB")
	fs.StringVar(&c.mirrors.CRAN, "cran-mirror", d.CRAN, "CRAN repository for R packages")
	env("cran-mirror", "SANDQ_CRAN_MIRROR")
	fs.StringVar(&c.mirrors.RubyGems, "rubygems-source", d.RubyGems, "gem source for Ruby gems")
	env("rubygems-source", "SANDQ_RUBYGEMS_SOURCE")
	fs.StringVar(&c.mirrors.Maven, "maven-repo", d.Maven, "Maven-layout repository for Java jars")
	env("maven-repo", "SANDQ_MAVEN_REPO")
	fs.StringVar(&c.installCA, "install-ca-bundle", defaultCABundle(), "PEM bundle that library installers trust; none: the images' own")
	env("install-ca-bundle", "SANDQ_INSTALL_CA_BUNDLE")
	fs.DurationVar(&c.installTimeout, "install-timeout", 5*time.Minute, "limit of a library install, all its commands together, at most 10m")
	env("install-timeout", "SANDQ_INSTALL_TIMEOUT")
	fs.IntVar(&c.installMemoryMB, "install-memory-mb", 2048, "memory of the library install container")
	env("install-memory-mb", "SANDQ_INSTALL_MEMORY_MB")
	fs.Float64Var(&c.installCPUs, "install-cpus", 1, "CPU quota of the library install container")
	env("install-cpus", "SANDQ_INSTALL_CPUS")
	fs.StringSliceVar(&c.installAllowHosts, "install-allow-hosts", nil, "host:port pairs library installs may reach besides the mirrors (comma-separated)")
	env("install-allow-hosts", "SANDQ_INSTALL_ALLOW_HOSTS")
	fs.IntVar(&c.installMaxMB, "install-max-mb", 2048, "largest installed library set on disk")
	env("install-max-mb", "SANDQ_INSTALL_MAX_MB")
	fs.Int64Var(&c.libsMaxTotalMB, "libs-max-total-mb", 10240, "installed library sets on the engine take at most this much; the least recently used go first")
	env("libs-max-total-mb", "SANDQ_LIBS_MAX_TOTAL_MB")
	fs.Int64Var(&c.libsMaxTenantMB, "libs-max-tenant-mb", 4096, "one tenant's installed library sets take at most this much; its least recently used go first, after each of its installs")
	env("libs-max-tenant-mb", "SANDQ_LIBS_MAX_TENANT_MB")
	fs.DurationVar(&c.libsMaxAge, "libs-max-age", 7*24*time.Hour, "an installed library set no job used for this long is removed")
	env("libs-max-age", "SANDQ_LIBS_MAX_AGE")
	fs.DurationVar(&c.libsGCInterval, "libs-gc-interval", 10*time.Minute, "how often library sets past those bounds are looked for")
	env("libs-gc-interval", "SANDQ_LIBS_GC_INTERVAL")
	fs.DurationVar(&c.envMaxAge, "env-max-age", 7*24*time.Hour, "an environment image (built from a recipe) no job used for this long is removed (checked every --libs-gc-interval)")
	env("env-max-age", "SANDQ_ENV_MAX_AGE")
	fs.Int64Var(&c.compileCacheMB, "compile-cache-mb", 256, "judged jobs' compiled programs kept on the worker's disk (a temporary directory) for identical compiles of the same tenant; one tenant's take at most a quarter; 0 turns the cache off")
	env("compile-cache-mb", "SANDQ_COMPILE_CACHE_MB")
	fs.BoolVar(&c.publishVersions, "publish-versions", true, "read each language image's toolchain version at start and publish it in Redis, for `enqueue langs`")
	env("publish-versions", "SANDQ_PUBLISH_VERSIONS")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := cfgpkg.ApplyEnv(fs, getenv); err != nil {
		return c, err
	}
	if err := c.redis.Check(); err != nil {
		return c, err
	}
	var err error
	if c.policy, err = c.limits.Policy(); err != nil {
		return c, err
	}
	if c.maxPerPool == 0 {
		c.maxPerPool = c.concurrency
	}
	switch {
	case c.concurrency < 1:
		return c, fmt.Errorf("--concurrency = %d, want >= 1", c.concurrency)
	case !sandbox.ValidBackend(c.engine.Backend):
		return c, fmt.Errorf("--backend %q: supported backends are: %s", c.engine.Backend, strings.Join(sandbox.Backends, ", "))
	case c.installTimeout <= 0 || c.installTimeout > store.MaxInstallTimeout:
		return c, fmt.Errorf("--install-timeout = %s, want > 0 and <= %s", c.installTimeout, store.MaxInstallTimeout)
	case c.installMemoryMB < 64:
		return c, fmt.Errorf("--install-memory-mb = %d, want >= 64", c.installMemoryMB)
	case c.installMaxMB < 1:
		return c, fmt.Errorf("--install-max-mb = %d, want >= 1", c.installMaxMB)
	case c.maxResultBytes < worker.MinMaxResultBytes:
		return c, fmt.Errorf("--max-result-bytes = %d, want >= %d", c.maxResultBytes, worker.MinMaxResultBytes)
	case artifacts.Overlap(c.artifactPrefix, c.inputsPrefix):
		return c, fmt.Errorf("--inputs-prefix %q overlaps --artifact-prefix %q: jobs could read artifacts, and the artifact sweeper would delete inputs", c.inputsPrefix, c.artifactPrefix)
	}
	for _, name := range list(c.warmSessions) {
		if err := worker.CheckWarmSession(name); err != nil {
			return c, fmt.Errorf("--warm-sessions: %w", err)
		}
	}
	if err := c.mirrors.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "libs" {
		os.Exit(libsCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	cfg, err := parseFlags(os.Args[1:], os.Getenv)
	if errors.Is(err, pflag.ErrHelp) {
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
	sc, err := serverConfig(cfg, log)
	if err != nil {
		return err
	}
	tp, stopTracing := tracing.Start(ctx, "sandq-worker", log)
	defer stopTracing()
	sc.Handler.TracerProvider = tp
	if cfg.compileCacheMB > 0 {
		dir, err := compileCacheDir(os.TempDir(), log)
		if err != nil {
			return fmt.Errorf("--compile-cache-mb: %w", err)
		}
		defer os.RemoveAll(dir)
		if sc.Handler.CompileCache, err = worker.NewCompileCache(dir, cfg.compileCacheMB<<20, 0); err != nil {
			return err
		}
	}
	srv, err := worker.NewServer(sc)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// compileCacheDir makes this worker's compile cache directory in tmp,
// named for its PID, after removing those of workers that are gone: a
// worker killed (SIGKILL, a crash) leaves its directory behind, up to
// --compile-cache-mb, and one restarting in a loop must not fill the disk.
// A directory whose PID lives (another worker on this machine, or a PID
// reused since) is left alone.
func compileCacheDir(tmp string, log zerolog.Logger) (string, error) {
	const prefix = "sandq-compile-cache-"
	old, _ := filepath.Glob(filepath.Join(tmp, prefix+"*"))
	for _, d := range old {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 || n == os.Getpid() {
			continue
		}
		if err := syscall.Kill(n, 0); !errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			log.Warn().Err(err).Str("dir", d).Msg("remove a gone worker's compile cache")
		}
	}
	return os.MkdirTemp(tmp, fmt.Sprintf("%s%d-", prefix, os.Getpid()))
}

// serverConfig is the worker.ServerConfig of the flags.
func serverConfig(cfg config, log zerolog.Logger) (worker.ServerConfig, error) {
	install := worker.InstallConfig{Mirrors: cfg.mirrors, Timeout: cfg.installTimeout,
		MemoryMB: int64(cfg.installMemoryMB), CPUs: cfg.installCPUs, MaxMB: int64(cfg.installMaxMB),
		AllowHosts: cfg.installAllowHosts}
	if cfg.installCA != "" && cfg.installCA != "none" {
		var err error
		if install.CABundle, err = os.ReadFile(cfg.installCA); err != nil {
			return worker.ServerConfig{}, fmt.Errorf("--install-ca-bundle: %w", err)
		}
	}
	return worker.ServerConfig{
		Redis: cfg.redis, Concurrency: cfg.concurrency, Engine: cfg.engine, Owner: cfg.owner,
		Pool: sandbox.PoolConfig{
			MinIdle: cfg.minIdle, MaxTotal: cfg.maxPerPool, MaxContainers: cfg.maxContainers,
			IdleTimeout: cfg.idleTimeout, MaxJobs: cfg.maxJobs, PrestartHold: prestartHold(cfg.prestartHold),
			OCIRuntime: cfg.ociRuntime, ReconcileInterval: cfg.reconcileInterval, ReconcileGrace: cfg.reconcileGrace,
			PinCPUs: pinCPUs(cfg.noPinCPUs),
		},
		Warm: list(cfg.warm),
		Handler: worker.Config{
			Policy: cfg.policy, ImagePrefix: cfg.imagePrefix,
			ArtifactPrefix: cfg.artifactPrefix, InputsPrefix: cfg.inputsPrefix,
			MaxResultBytes: cfg.maxResultBytes, StreamAll: cfg.streamAll, StreamTTL: cfg.streamTTL,
			MaxArtifacts: cfg.maxArtifacts, MaxArtifactBytes: cfg.maxArtifactBytes, UploadAttempts: cfg.uploadAttempts,
			NoPrestart: cfg.noPrestart, Install: install, EngineWait: cfg.engineWait,
		},
		Artifacts: cfg.artifacts, ArtifactTTL: cfg.artifactTTL, ArtifactSweepInterval: cfg.artifactSweep,
		MaxSessions: cfg.maxSessions, WarmSessions: list(cfg.warmSessions),
		ShutdownTimeout: cfg.shutdownTimeout, AllowUnpinnedOOM: cfg.allowUnpinnedOOM, PollInterval: cfg.pollInterval, MetricsAddr: cfg.metricsAddr,
		LibsMaxBytes: cfg.libsMaxTotalMB << 20, LibsMaxTenantBytes: cfg.libsMaxTenantMB << 20, LibsMaxAge: cfg.libsMaxAge, LibsGCInterval: cfg.libsGCInterval, EnvMaxAge: cfg.envMaxAge,
		PublishVersions: cfg.publishVersions, Logger: log,
	}, nil
}

// list splits a comma-separated flag, dropping blanks.
func list(s string) []string {
	var out []string
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// libsCommand is `worker libs list` and `worker libs rm VOLUME...`: the
// installed library sets on the worker's engine, with the worker's flags
// (the engine, Redis, the prefix).
func libsCommand(args []string, stdout, stderr io.Writer) int {
	usage := "usage: worker libs list [flags] | worker libs rm [flags] VOLUME..."
	if len(args) == 0 || (args[0] != "list" && args[0] != "rm") {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	sub := args[0]
	var vols []string
	var flagArgs []string
	for _, a := range args[1:] {
		if sub == "rm" && !strings.HasPrefix(a, "-") && (len(flagArgs) == 0 || !needsValue(flagArgs[len(flagArgs)-1])) {
			vols = append(vols, a)
		} else {
			flagArgs = append(flagArgs, a)
		}
	}
	cfg, err := parseFlags(flagArgs, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "worker libs:", err)
		return 2
	}
	ctx := context.Background()
	rdb := cfg.redis.Client()
	defer rdb.Close()
	st, err := store.New(rdb, cfg.redis.StoreConfig())
	if err != nil {
		fmt.Fprintln(stderr, "worker libs:", err)
		return 2
	}
	rt, err := sandbox.Open(ctx, cfg.engine)
	if err != nil {
		fmt.Fprintln(stderr, "worker libs:", err)
		return 2
	}
	defer rt.Close()
	c := &worker.LibsCollector{Volumes: rt, Store: st, MaxBytes: cfg.libsMaxTotalMB << 20, MaxTenantBytes: cfg.libsMaxTenantMB << 20, MaxAge: cfg.libsMaxAge}
	switch sub {
	case "list":
		sets, err := c.Sets(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "worker libs:", err)
			return 1
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUME\tTENANT\tSIZE\tLAST USED")
		for _, s := range sets {
			size := "unknown"
			if s.Bytes > 0 {
				size = fmt.Sprintf("%.1f MiB", float64(s.Bytes)/(1<<20))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Volume, cmp.Or(s.Tenant, "-"), size, s.LastUsed.Format(time.RFC3339))
		}
		_ = tw.Flush()
	case "rm":
		if len(vols) == 0 {
			fmt.Fprintln(stderr, usage)
			return 2
		}
		status := 0
		for _, v := range vols {
			if err := c.Remove(ctx, v); err != nil {
				fmt.Fprintf(stderr, "worker libs: %s: %v\n", v, err)
				status = 1
				continue
			}
			fmt.Fprintln(stdout, v)
		}
		return status
	}
	return 0
}

// needsValue reports whether a flag argument is a flag waiting for its
// value in the next argument ("--backend" but not "--backend=podman").
func needsValue(a string) bool {
	return strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && a != "--publish-versions" && a != "--s3-secure"
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

// pinCPUs is PoolConfig.PinCPUs: nil (this host's CPUs) unless turned off.
func pinCPUs(off bool) []int {
	if off {
		return []int{}
	}
	return nil
}

// prestartHold maps --prestart-hold to PoolConfig.PrestartHold: on the
// command line 0 (or less) keeps the interpreter, in the pool's config
// negative does.
func prestartHold(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
