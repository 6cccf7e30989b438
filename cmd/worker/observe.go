package main

import (
	"fmt"
	"strings"

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
	}
	m.registry.MustRegister(m.jobs, m.wall, poolCollector{pool},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(r jobs.Result) {
	m.jobs.WithLabelValues(r.Lang, string(r.Status)).Inc()
	if r.Usage.WallMS > 0 {
		m.wall.WithLabelValues(r.Lang).Observe(float64(r.Usage.WallMS) / 1000)
	}
}

var poolDesc = prometheus.NewDesc("sandq_pool_containers", "Containers per pool key.", []string{"pool", "state"}, nil)

// poolCollector reads the pool's counts at scrape time.
type poolCollector struct{ pool *sandbox.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.pool.Stats() {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Idle), s.Pool, "idle")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Total-s.Idle), s.Pool, "busy")
	}
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
