package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

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
}

func newMetrics(pool *sandbox.Pool) *metrics {
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
	}
	m.registry.MustRegister(m.jobs, m.wall, m.phases, poolCollector{pool},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(r jobs.Result) {
	m.jobs.WithLabelValues(r.Lang, string(r.Status)).Inc()
	if r.Usage.WallMS > 0 {
		m.wall.WithLabelValues(r.Lang).Observe(float64(r.Usage.WallMS) / 1000)
	}
}

// phase records a phase of a job (worker.Config.ObservePhase).
func (m *metrics) phase(name string, d time.Duration) {
	m.phases.WithLabelValues(name).Observe(d.Seconds())
}

var (
	poolDesc = prometheus.NewDesc("sandq_pool_containers",
		"Containers per pool key: the key's unique name (its image, memory, tenant and a hash of the whole key), a bounded set as keys are dropped when idle.",
		[]string{"pool", "state"}, nil)
	totalDesc = prometheus.NewDesc("sandq_containers", "Containers of this worker, every key and installs, under --max-containers.", nil, nil)
)

// poolCollector reads the pool's counts at scrape time. Every pool key has
// a unique name (sandbox.Stats.Pool), so no two series collide, and keys
// are dropped once idle past --idle-timeout: the series stay bounded.
type poolCollector struct{ pool *sandbox.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDesc; ch <- totalDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	stats, total := c.pool.Stats()
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Idle), s.Pool, "idle")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Total-s.Idle), s.Pool, "busy")
	}
	ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(total))
}

// asynqLogger adapts zerolog to asynq's Logger interface.
type asynqLogger struct{ log zerolog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Error(args ...any) { l.log.Error().Msg(fmt.Sprint(args...)) }
func (l asynqLogger) Fatal(args ...any) { l.log.Fatal().Msg(fmt.Sprint(args...)) }

func asynqLevel(s string) asynq.LogLevel {
	switch strings.ToLower(s) {
	case "debug":
		return asynq.DebugLevel
	case "warn":
		return asynq.WarnLevel
	case "error":
		return asynq.ErrorLevel
	}
	return asynq.InfoLevel
}
