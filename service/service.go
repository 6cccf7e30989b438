package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Config configures a [Service]. Zero fields take the defaults their
// comments name.
type Config struct {
	// Client is the producer client jobs are enqueued and read with; its
	// Redis, prefixes and policy are the service's. Required.
	Client *client.Client
	// StreamClient serves the blocking reads: live output (each follower
	// holds one of its Redis connections) and sessions (a cell's caller
	// waits for the worker's reply in a BLPOP), so it should have a pool
	// of its own, MaxStreams and room for cells. Default: Client.
	StreamClient *client.Client
	// Open serves callers without a key, as the anonymous tenant with
	// every scope, while no API key exists: for an API on loopback only.
	Open bool
	// ArtifactDir is the local artifact store's directory, whose files
	// artifact lookups read (the S3 store's are fetched by URL). Empty:
	// none.
	ArtifactDir string
	// RatePerSecond caps each key's requests per second, over every
	// process (a key may set its own). Default 100.
	RatePerSecond int
	// MaxQueued caps a tenant's jobs not yet final (a key may set its
	// own). Default 10,000.
	MaxQueued int
	// MaxQueuedBytes caps the held bytes (jobs.Job.HeldBytes) of a tenant's jobs not yet
	// final (a key may set its own). Default 512 MiB.
	MaxQueuedBytes int64
	// MaxSessions caps a tenant's sessions not ended. Default 8.
	MaxSessions int
	// MaxBatchJobs caps the jobs of one batch. Default 10,000.
	MaxBatchJobs int
	// MaxStreams caps the live-output followers of this process at once
	// (more are Unavailable). Default 256.
	MaxStreams int
	// MaxStreamsPerTenant caps one tenant's followers in this process
	// (more are TooMany). Default an eighth of MaxStreams, at least 1.
	MaxStreamsPerTenant int
	// MaxDownloads caps the downloads this process serves at once: files
	// of sessions (held in memory, up to 16 MiB each) and artifacts
	// (streamed). Default 8. MaxDownloadsPerTenant caps one tenant's.
	// Default 2.
	MaxDownloads, MaxDownloadsPerTenant int
	// Webhooks configures deliveries.
	Webhooks WebhookConfig
	// DeliverWebhooks runs this process's share of the webhook
	// deliveries (an API process does; a CLI's MCP server need not).
	DeliverWebhooks bool
	// Logger gets the deliveries. Default: discard.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	c.RatePerSecond = cmp.Or(c.RatePerSecond, 100)
	c.MaxQueued = cmp.Or(c.MaxQueued, 10_000)
	c.MaxQueuedBytes = cmp.Or(c.MaxQueuedBytes, 512<<20)
	c.MaxSessions = cmp.Or(c.MaxSessions, 8)
	c.MaxBatchJobs = cmp.Or(c.MaxBatchJobs, 10_000)
	c.MaxStreams = cmp.Or(c.MaxStreams, 256)
	c.MaxStreamsPerTenant = cmp.Or(c.MaxStreamsPerTenant, max(1, c.MaxStreams/8))
	c.MaxDownloads = cmp.Or(c.MaxDownloads, 8)
	c.MaxDownloadsPerTenant = cmp.Or(c.MaxDownloadsPerTenant, 2)
	c.StreamClient = cmp.Or(c.StreamClient, c.Client)
	c.Webhooks = c.Webhooks.withDefaults()
	return c
}

// Service is what every door does for a caller: the caller's IDs, scopes
// and caps; admission and quotas; jobs, batches, sessions and artifacts as
// the caller sees them; webhooks. It talks to Redis only through the
// client and the store. Doors (the HTTP API, MCP, the CLI) map its typed
// errors ([Error]) to their own answers and hold no rule of their own.
type Service struct {
	cfg       Config
	st        *store.Store
	hub       *hub
	hooks     *webhooks
	streams   *gate // live-output followers
	downloads *gate // files and artifacts being served
	cancel    context.CancelFunc
	done      chan struct{}
	// Open mode (OpenAllowed): the last key count's time and answer, and
	// whether a key has been seen.
	openChecked atomic.Int64
	openNow     atomic.Bool
	closedOpen  atomic.Bool
	// Refusals by quota since start, per tenant (Refusals).
	refusalsMu sync.Mutex
	refusals   map[refusal]int64
}

// New starts the service's subscription to job ends and its webhook
// dispatcher, and returns it once the subscription is confirmed.
func New(ctx context.Context, cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if cfg.Client == nil {
		return nil, errors.New("service: Config needs Client")
	}
	bg, cancel := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, st: cfg.Client.Store(), cancel: cancel, done: make(chan struct{}),
		refusals: map[refusal]int64{}}
	s.streams = newGate("event streams", QuotaStreams, cfg.MaxStreams, cfg.MaxStreamsPerTenant, s.Refused)
	s.downloads = newGate("downloads", QuotaDownloads, cfg.MaxDownloads, cfg.MaxDownloadsPerTenant, s.Refused)
	s.hub = newHub(s.st, cfg.Logger)
	s.hooks = newWebhooks(s.st, cfg.Client, cfg.Webhooks, cfg.Logger)
	s.hub.onDone = s.hooks.poke
	go func() {
		defer close(s.done)
		if cfg.DeliverWebhooks {
			go s.hooks.run(bg)
		}
		s.hub.run(bg)
	}()
	readyCtx, cancelReady := context.WithTimeout(ctx, 10*time.Second)
	defer cancelReady()
	if err := s.hub.waitReady(readyCtx); err != nil {
		s.Close()
		return nil, fmt.Errorf("service: subscribe to Redis: %w", err)
	}
	return s, nil
}

// Close stops the subscription and the webhook dispatcher.
func (s *Service) Close() {
	s.cancel()
	<-s.done
}

// Ping checks that Redis answers.
func (s *Service) Ping(ctx context.Context) error { return s.st.Redis().Ping(ctx).Err() }

// Waiting counts the requests waiting for a job to end now.
func (s *Service) Waiting() int { return s.hub.waiting() }

// Policy is the operator's policy with c's caps on limits.
func (s *Service) Policy(c Caller) jobs.Policy {
	p := s.cfg.Client.Policy().WithDefaults()
	for _, f := range jobs.LimitTable {
		if v := f.Get(&c.Caps); v > 0 && v < f.Get(&p.MaxLimits) {
			f.Set(&p.MaxLimits, v)
		}
	}
	return p
}

// capLimits sets the limits a job or session in lang leaves to the
// worker's defaults to c's caps where those defaults would pass them: the
// worker applies its own defaults, which know nothing of keys. The
// defaults compared are the effective ones: the language's own where it
// has one (C++'s 512 MiB), else the operator's.
func (s *Service) capLimits(lang string, l *jobs.Limits, c Caller) {
	var eff jobs.Limits
	s.cfg.Client.Policy().FillLimitsOf(lang, &eff)
	for _, f := range jobs.LimitTable {
		if v := f.Get(&c.Caps); v > 0 && f.Get(l) == 0 && f.Get(&eff) > v {
			f.Set(l, v)
		}
	}
}
