package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandq/sandq/service"
)

var (
	tenantJobsDesc = prometheus.NewDesc("sandq_tenant_jobs",
		"A tenant's jobs not yet final, by state: released (handed to the queue or running) or held (waiting in the tenant's lane for its share of the workers). Tenants with jobs only, at most 1,000.",
		[]string{"tenant", "state"}, nil)
	tenantBytesDesc = prometheus.NewDesc("sandq_tenant_held_bytes",
		"Bytes a tenant's jobs not yet final hold against its cap (payloads, and the live output of streaming jobs).",
		[]string{"tenant"}, nil)
	tenantRefusalsDesc = prometheus.NewDesc("sandq_tenant_refusals_total",
		"Requests of a tenant refused by a quota (jobs, bytes, sessions, rate, streams, downloads, mcp_sessions), by this process since it started.",
		[]string{"tenant", "quota"}, nil)
)

// tenantCollector reads the tenants' ledgers from Redis at scrape time
// (one listing and one pipelined round trip, 2 s at most) and the
// process's refusal counts.
type tenantCollector struct{ svc *service.Service }

func (c tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantJobsDesc
	ch <- tenantBytesDesc
	ch <- tenantRefusalsDesc
}

func (c tenantCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.svc.Refusals() {
		ch <- prometheus.MustNewConstMetric(tenantRefusalsDesc, prometheus.CounterValue, float64(r.N), r.Tenant, r.Quota)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	usages, err := c.svc.TenantUsages(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(tenantJobsDesc, err)
		return
	}
	for t, u := range usages {
		ch <- prometheus.MustNewConstMetric(tenantJobsDesc, prometheus.GaugeValue, float64(u.Running), t, "released")
		ch <- prometheus.MustNewConstMetric(tenantJobsDesc, prometheus.GaugeValue, float64(max(u.Jobs-u.Running, 0)), t, "held")
		ch <- prometheus.MustNewConstMetric(tenantBytesDesc, prometheus.GaugeValue, float64(u.Bytes), t)
	}
}
