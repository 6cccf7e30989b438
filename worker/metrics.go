package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// metrics are the worker's Prometheus metrics. Prometheus' client is used
// rather than hand-written exposition: it is the format every scraper
// speaks, and it brings the Go runtime and process collectors.
type metrics struct {
	registry *prometheus.Registry
	jobs     *prometheus.CounterVec
	wall     *prometheus.HistogramVec
	phases   *prometheus.HistogramVec
	wait     *prometheus.HistogramVec
	running  tenantRunning
	recent   recentWalls
}

// newMetrics registers the job metrics and the Go runtime and process
// collectors; watchPool adds the pool's.
func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandq_jobs_total", Help: "Jobs finished by this worker, by language and final status.",
		}, []string{"lang", "status"}),
		wall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandq_job_wall_seconds", Help: "Wall time of the program's run step.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"lang"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandq_job_phase_seconds",
			Help:    "Where a job's time goes, by phase: queue_wait, start, install, plan, acquire, agent (files, steps, collection: the agent's round trip), run (the steps' own wall time, within agent), upload, store_result; scrub (between two jobs, off the job's path).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
		}, []string{"phase"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandq_tenant_queue_wait_seconds",
			Help:    "A tenant's jobs' wait from admission (a wait in the tenant's lane included) to a worker taking them; its p50 and p99 are histogram_quantile(0.5 or 0.99, ...) by tenant.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 20),
		}, []string{"tenant"}),
		running: tenantRunning{n: map[string]int{}},
		recent:  recentWalls{byLang: map[string]*wallRing{}},
	}
	m.registry.MustRegister(m.jobs, m.wall, m.phases, m.wait, &m.running,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchPool adds the pool's container counts, read at scrape time.
func (m *metrics) watchPool(p poolStats) { m.registry.MustRegister(poolCollector{p}) }

// observe counts a final result (Config.Observe).
func (m *metrics) observe(r jobs.Result) {
	m.jobs.WithLabelValues(r.Lang, string(r.Status)).Inc()
	if r.Usage.WallMS > 0 {
		m.wall.WithLabelValues(r.Lang).Observe(float64(r.Usage.WallMS) / 1000)
		m.recent.add(r.Lang, r.Usage.WallMS)
	}
}

// recentWindow is how many of a language's latest jobs the worker's
// published latency holds.
const recentWindow = 500

// recentWalls keeps the wall times of each language's latest jobs, for
// the status a worker publishes (store.WorkerStatus).
type recentWalls struct {
	mu     sync.Mutex
	byLang map[string]*wallRing
}

type wallRing struct {
	ms   []int64
	next int
}

func (r *recentWalls) add(lang string, ms int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byLang[lang]
	if w == nil {
		w = &wallRing{}
		r.byLang[lang] = w
	}
	if len(w.ms) < recentWindow {
		w.ms = append(w.ms, ms)
		return
	}
	w.ms[w.next] = ms
	w.next = (w.next + 1) % recentWindow
}

// latency returns a histogram per language, by name.
func (r *recentWalls) latency() []store.LatencyStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]store.LatencyStatus, 0, len(r.byLang))
	for _, lang := range slices.Sorted(maps.Keys(r.byLang)) {
		out = append(out, store.Latency(lang, r.byLang[lang].ms))
	}
	return out
}

// status is what the worker publishes of its pools and recent jobs.
func (m *metrics) status(p poolStats) store.WorkerStatus {
	stats, total := p.Stats()
	st := store.WorkerStatus{Containers: total, Latency: m.recent.latency()}
	for _, s := range stats {
		st.Pools = append(st.Pools, store.PoolStatus{Pool: s.Pool, Idle: s.Idle, Busy: s.Total - s.Idle, Warm: s.Warm})
	}
	slices.SortFunc(st.Pools, func(a, b store.PoolStatus) int { return cmp.Compare(a.Pool, b.Pool) })
	return st
}

// tenant records a job's start (its queue wait) or, wait < 0, its end
// (Config.ObserveTenant).
func (m *metrics) tenant(tenant string, wait time.Duration) {
	tenant = cmp.Or(tenant, "-")
	if wait < 0 {
		m.running.add(tenant, -1)
		return
	}
	m.wait.WithLabelValues(tenant).Observe(wait.Seconds())
	m.running.add(tenant, 1)
}

var runningDesc = prometheus.NewDesc("sandq_tenant_running_jobs",
	"Jobs this worker runs now, by tenant (tenants with running jobs only).", []string{"tenant"}, nil)

// tenantRunning counts the jobs running now by tenant; a tenant with none
// has no series.
type tenantRunning struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *tenantRunning) add(tenant string, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n[tenant] += d; r.n[tenant] <= 0 {
		delete(r.n, tenant)
	}
}

func (r *tenantRunning) Describe(ch chan<- *prometheus.Desc) { ch <- runningDesc }

func (r *tenantRunning) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, n := range r.n {
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(n), t)
	}
}

// phase records a phase of a job (Config.ObservePhase).
func (m *metrics) phase(name string, d time.Duration) {
	m.phases.WithLabelValues(name).Observe(d.Seconds())
}

var (
	poolDesc = prometheus.NewDesc("sandq_pool_containers",
		"Containers per pool key: the key's unique name (its image, memory, tenant and a hash of the whole key), a bounded set as keys are dropped when idle.",
		[]string{"pool", "state"}, nil)
	totalDesc = prometheus.NewDesc("sandq_containers", "Containers of this worker, every key and installs, under --max-containers.", nil, nil)
)

// poolStats is what the metrics need of the job pool.
type poolStats interface {
	Stats() ([]sandbox.Stats, int)
}

var _ poolStats = (*sandbox.Pool)(nil)

// poolCollector reads the pool's counts at scrape time. Every pool key has
// a unique name (sandbox.Stats.Pool), so no two series collide, and keys
// are dropped once idle past --idle-timeout: the series stay bounded.
type poolCollector struct{ pool poolStats }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDesc; ch <- totalDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	stats, total := c.pool.Stats()
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Idle), s.Pool, "idle")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Total-s.Idle), s.Pool, "busy")
	}
	ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(total))
}

// httpServer is what the Server needs of its metrics and health server at
// shutdown.
type httpServer interface {
	Shutdown(ctx context.Context) error
}

var _ httpServer = (*http.Server)(nil)

// serveHTTP serves /metrics from reg and /healthz from health (200 "ok",
// or 503 with health's error, which gets 3 s) on ln until the returned
// server is shut down.
func serveHTTP(ln net.Listener, reg *prometheus.Registry, health func(context.Context) error, log zerolog.Logger) *http.Server {
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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("addr", ln.Addr().String()).Msg("metrics server")
		}
	}()
	return srv
}
