// Command api is sandq's HTTP API server (see package api), and the
// management of its keys:
//
//	api [flags]                                   serve on --addr
//	api keys create --tenant T [--scope S]...     print a new key, alone on its line
//	api keys list                                 the keys, without secrets
//	api keys revoke ID                            revoke a key
//
// Every flag has a SANDQ_* environment variable; a flag wins over it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/tracing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandq/sandq/api"
	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/service"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// flags are the server's flags.
type flags struct {
	redis         config.Redis
	addr          string
	artifactDir   string
	rate          int
	maxQueued     int
	maxQueuedB    int64
	maxWait       time.Duration
	maxJobBytes   int64
	maxBatchBytes int64
	maxBatchJobs  int
	maxStreams    int
	tenantStreams int
	downloads     int
	tenantDownl   int
	writeStall    time.Duration
	tenantMCP     int
	webhookAllow  []string
	webhookTO     time.Duration
	webhookTries  int
	maxSessions   int
	maxMCP        int
	mcpWait       time.Duration
	limits        config.Limits
	logLevel      string
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	var f flags
	root := &cobra.Command{
		Use:   "api",
		Short: "sandq's HTTP API: enqueue, wait, stream, cancel, fetch artifacts",
		Long: `api serves sandq's HTTP API on --addr (OpenAPI at /openapi.json, docs at
/docs). Requests authenticate with API keys (api keys create); with no key
in Redis it serves without authentication, on a loopback address only.`,
		SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), getenv); err != nil {
				return err
			}
			return f.redis.Check()
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f, stderr) },
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	f.redis.Register(pf, "how long batch records are kept (the workers' result TTL)")
	fl := root.Flags()
	env := func(name, v string) { config.Env(fl, name, v) }
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address")
	env("addr", "SANDQ_API_ADDR")
	fl.StringVar(&f.artifactDir, "artifact-dir", config.DefaultArtifactDir(), "the local artifact store the workers write, whose files the API serves")
	env("artifact-dir", "SANDQ_ARTIFACT_DIR")
	fl.IntVar(&f.rate, "rate", 100, "requests per second per key, over every API process (a key may set its own)")
	env("rate", "SANDQ_API_RATE")
	fl.IntVar(&f.maxQueued, "max-queued-per-tenant", 10_000, "jobs not yet final a tenant may have (a key may set its own)")
	env("max-queued-per-tenant", "SANDQ_API_MAX_QUEUED")
	fl.Int64Var(&f.maxQueuedB, "max-queued-bytes-per-tenant", 512<<20, "bytes the jobs not yet final of a tenant may hold (payloads, and the live output of streaming jobs) (a key may set its own)")
	env("max-queued-bytes-per-tenant", "SANDQ_API_MAX_QUEUED_BYTES")
	fl.IntVar(&f.maxSessions, "max-sessions-per-tenant", 8, "sessions not ended a tenant may have (429 past it)")
	env("max-sessions-per-tenant", "SANDQ_API_MAX_SESSIONS")
	fl.IntVar(&f.maxMCP, "max-mcp-sessions", 1000, "MCP sessions open at once in this process (/mcp; 503 past it); each is closed after 10 minutes without a request")
	env("max-mcp-sessions", "SANDQ_API_MAX_MCP_SESSIONS")
	fl.IntVar(&f.tenantMCP, "max-mcp-sessions-per-tenant", 0, "MCP sessions one tenant may have open in this process (429 past it); 0 means an eighth of --max-mcp-sessions")
	env("max-mcp-sessions-per-tenant", "SANDQ_API_MAX_MCP_SESSIONS_PER_TENANT")
	fl.DurationVar(&f.mcpWait, "mcp-max-wait", 10*time.Minute, "longest an MCP tool waits for a job (wait_seconds' cap)")
	env("mcp-max-wait", "SANDQ_API_MCP_MAX_WAIT")
	fl.DurationVar(&f.maxWait, "max-wait", time.Minute, "longest ?wait= long-poll")
	env("max-wait", "SANDQ_API_MAX_WAIT")
	fl.Int64Var(&f.maxJobBytes, "max-job-bytes", 16<<20, "largest POST /v1/jobs body (413 past it)")
	env("max-job-bytes", "SANDQ_API_MAX_JOB_BYTES")
	fl.Int64Var(&f.maxBatchBytes, "max-batch-bytes", 64<<20, "largest POST /v1/batches body (413 past it)")
	env("max-batch-bytes", "SANDQ_API_MAX_BATCH_BYTES")
	fl.IntVar(&f.maxBatchJobs, "max-batch-jobs", 10_000, "most jobs in one batch")
	env("max-batch-jobs", "SANDQ_API_MAX_BATCH_JOBS")
	fl.IntVar(&f.maxStreams, "max-streams", 256, "event streams one process follows at once (each holds a Redis connection)")
	fl.IntVar(&f.tenantStreams, "max-streams-per-tenant", 0, "event streams of one tenant one process follows at once (429 past it); 0 means an eighth of --max-streams")
	env("max-streams-per-tenant", "SANDQ_API_MAX_STREAMS_PER_TENANT")
	fl.IntVar(&f.downloads, "max-downloads", 8, "downloads (session files, local artifacts) one process serves at once (503 past it); a session file passes through in 1 MiB chunks")
	env("max-downloads", "SANDQ_API_MAX_DOWNLOADS")
	fl.IntVar(&f.tenantDownl, "max-downloads-per-tenant", 2, "downloads of one tenant one process serves at once (429 past it)")
	env("max-downloads-per-tenant", "SANDQ_API_MAX_DOWNLOADS_PER_TENANT")
	fl.DurationVar(&f.writeStall, "write-stall", 10*time.Second, "how long a client may take to accept each chunk of a download before it is cut off")
	env("write-stall", "SANDQ_API_WRITE_STALL")
	env("max-streams", "SANDQ_API_MAX_STREAMS")
	fl.StringSliceVar(&f.webhookAllow, "webhook-allow-hosts", nil, "webhook targets allowed although loopback, private or link-local: host, host:port, IP or CIDR (comma-separated)")
	env("webhook-allow-hosts", "SANDQ_WEBHOOK_ALLOW_HOSTS")
	fl.DurationVar(&f.webhookTO, "webhook-timeout", 10*time.Second, "limit of one webhook delivery attempt")
	env("webhook-timeout", "SANDQ_WEBHOOK_TIMEOUT")
	fl.IntVar(&f.webhookTries, "webhook-attempts", 8, "attempts of one webhook delivery (exponential backoff from 1 s)")
	env("webhook-attempts", "SANDQ_WEBHOOK_ATTEMPTS")
	f.limits.Register(fl, "the workers")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	env("log-level", "SANDQ_LOG_LEVEL")
	root.AddCommand(keysCmd(&f, stdout))
	root.SetArgs(args)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "api:", err)
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 1
	}
	return 0
}

func serve(ctx context.Context, f flags, stderr io.Writer) error {
	level, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	log := zerolog.New(stderr).Level(level).With().Timestamp().Str("component", "api").Logger()
	_, stopTracing := tracing.Start(ctx, "sandq-api", log)
	defer stopTracing()
	policy, err := f.limits.Policy()
	if err != nil {
		return err
	}
	// Named with the process ID, so an operator (or a test) can count
	// each API process's connections in CLIENT LIST.
	opts := f.redis.Options()
	opts.ClientName = fmt.Sprintf("sandq-api:%d", os.Getpid())
	// go-redis dials past PoolSize when every connection is busy; a
	// burst of requests would then open a connection each, and Redis's
	// clients (10,000) are every component's. Capped, a request waits for
	// a connection (PoolTimeout) instead: 10 per CPU, plus go-redis's
	// pipeline pool (10) and the subscriptions (one for every long-poll).
	opts.PoolSize = 10 * runtime.GOMAXPROCS(0)
	opts.MaxActiveConns = opts.PoolSize
	rdb := redis.NewUniversalClient(opts)
	defer rdb.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis %s: %w", f.redis.Addr, err)
	}
	cc := f.redis.ClientConfig()
	cc.Redis, cc.RedisOptions, cc.Policy = rdb, nil, policy
	cl, err := client.New(cc)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Event streams and session cells hold a connection each in a
	// blocking read: a pool of their own (as many streams again for
	// cells), so they never starve the other requests.
	so := f.redis.Options()
	so.PoolSize, so.ClientName = 2*f.maxStreams+4, fmt.Sprintf("sandq-api-streams:%d", os.Getpid())
	so.MaxActiveConns = so.PoolSize
	sc := f.redis.ClientConfig()
	sc.RedisOptions, sc.Policy = so, policy
	streamClient, err := client.New(sc)
	if err != nil {
		return err
	}
	defer streamClient.Close()

	n, err := service.NewKeys(cl.Store()).Count(ctx)
	if err != nil {
		return err
	}
	open := n == 0
	if open && !loopback(f.addr) {
		return fmt.Errorf("no API keys exist (api keys create --tenant T): refusing to serve %s without authentication; listen on a loopback address or make a key", f.addr)
	}
	srv, err := api.New(ctx, api.Config{
		Client: cl, StreamClient: streamClient, Open: open,
		ArtifactDir: f.artifactDir, RatePerSecond: f.rate, MaxQueued: f.maxQueued, MaxQueuedBytes: f.maxQueuedB, MaxSessions: f.maxSessions, MaxWait: f.maxWait, MaxMCPSessions: f.maxMCP, MaxMCPSessionsPerTenant: f.tenantMCP, MCPMaxWait: f.mcpWait,
		MaxJobBytes: f.maxJobBytes, MaxBatchBytes: f.maxBatchBytes, MaxBatchJobs: f.maxBatchJobs, MaxStreams: f.maxStreams, MaxStreamsPerTenant: f.tenantStreams,
		MaxDownloads: f.downloads, MaxDownloadsPerTenant: f.tenantDownl, WriteStall: f.writeStall,
		Webhooks: service.WebhookConfig{AllowHosts: f.webhookAllow, Timeout: f.webhookTO, MaxAttempts: f.webhookTries},
		Logger:   log,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := srv.HTTPServer(f.addr)
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	if open {
		log.Warn().Str("addr", ln.Addr().String()).Msg("no API keys exist: serving requests WITHOUT a key, on loopback only, until one is made with `api keys create`")
	}
	log.Info().Str("addr", ln.Addr().String()).Str("redis", f.redis.Addr).Bool("auth", !open).Msg("api started")
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = hs.Close()
	}
	return nil
}

// loopback reports whether addr listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func keysCmd(f *flags, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Create, list and revoke API keys"}
	var (
		tenant    string
		scopes    []string
		rate      int
		maxQueued int
		maxBytes  int64
		running   int
		caps      string
	)
	create := &cobra.Command{
		Use:   "create --tenant T",
		Short: "Make a key for tenant T and print it, alone on its line (it is shown once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, done, err := f.keys()
			if err != nil {
				return err
			}
			defer done()
			o := service.KeyOptions{Scopes: scopes, RatePerSecond: rate, MaxQueued: maxQueued, MaxQueuedBytes: maxBytes, MaxRunning: running}
			if caps != "" {
				if err := config.DecodeLimits(caps, &o.MaxLimits); err != nil {
					return fmt.Errorf("--caps: %w", err)
				}
			}
			key, k, err := keys.Create(cmd.Context(), tenant, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, key)
			fmt.Fprintf(cmd.ErrOrStderr(), "api: key %s for tenant %s, scopes %s; its webhooks are signed with %s\n",
				k.ID, k.Tenant, strings.Join(k.Scopes, ","), k.WebhookSecret)
			return nil
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "the tenant the key's jobs belong to (required)")
	_ = create.MarkFlagRequired("tenant")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "scope: "+strings.Join(service.Scopes, ", ")+" (repeatable; default "+strings.Join(service.DefaultScopes, ",")+"; "+service.ScopeCritical+" lets its jobs use the critical queue, "+service.ScopeNetwork+" ask for a network within --run-allow-hosts)")
	create.Flags().IntVar(&rate, "rate", 0, "requests per second (default the server's --rate)")
	create.Flags().IntVar(&maxQueued, "max-queued", 0, "jobs not yet final (default the server's --max-queued-per-tenant)")
	create.Flags().Int64Var(&maxBytes, "max-queued-bytes", 0, "bytes the jobs not yet final may hold (default the server's --max-queued-bytes-per-tenant)")
	create.Flags().IntVar(&running, "max-running", 0, "jobs handed to the workers at once (default a fair share of the workers' slots)")
	create.Flags().StringVar(&caps, "caps", "", `caps on the key's job limits, as job limits JSON, e.g. '{"memory_mb":512}'`)

	list := &cobra.Command{
		Use: "list", Short: "List the keys (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, done, err := f.keys()
			if err != nil {
				return err
			}
			defer done()
			ks, err := keys.List(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTENANT\tSCOPES\tCREATED")
			for _, k := range ks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.Tenant, strings.Join(k.Scopes, ","), k.Created.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke a key: its requests get 401 from now on", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, done, err := f.keys()
			if err != nil {
				return err
			}
			defer done()
			return keys.Revoke(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// keys returns the API key manager of the flags' namespace, and a function
// that closes its Redis client.
func (f *flags) keys() (*service.Keys, func(), error) {
	rdb := f.redis.Client()
	st, err := store.New(rdb, f.redis.StoreConfig())
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return service.NewKeys(st), func() { _ = rdb.Close() }, nil
}
