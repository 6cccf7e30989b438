package worker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

type fakePoolStats struct {
	stats func() ([]sandbox.Stats, int)
}

func (f *fakePoolStats) Stats() ([]sandbox.Stats, int) {
	if f.stats == nil {
		panic("fakePoolStats: unexpected Stats")
	}
	return f.stats()
}

var _ poolStats = (*fakePoolStats)(nil)

// TestMetricsServer scrapes the worker's /metrics and /healthz over HTTP:
// the metric names dashboards use, and health failures as 503.
func TestMetricsServer(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		url string
		m   *metrics
		// health is /healthz's error.
		mu     sync.Mutex
		health error
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{m: newMetrics()}
		b.m.watchPool(&fakePoolStats{stats: func() ([]sandbox.Stats, int) {
			return []sandbox.Stats{{Pool: "python-256m", Idle: 1, Total: 3}}, 3
		}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := serveHTTP(ln, b.m.registry, func(context.Context) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.health
		}, zerolog.Nop())
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, srv.Shutdown(ctx))
		})
		b.url = "http://" + ln.Addr().String()
		return b
	}
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	t.Run("Metrics", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.m.observe(jobs.Result{Lang: "python", Status: jobs.StatusSucceeded, Usage: jobs.Usage{WallMS: 20}})
		b.m.phase("acquire", time.Millisecond)
		b.m.tenant("acme", 2*time.Second)
		b.m.tenant("acme", 3*time.Second)
		b.m.tenant("acme", -1)
		b.m.tenant("gone", time.Second)
		b.m.tenant("gone", -1)

		code, body := get(t, b.url+"/metrics")
		require.Equal(t, http.StatusOK, code)
		for _, want := range []string{
			`sandq_jobs_total{lang="python",status="succeeded"} 1`,
			`sandq_job_wall_seconds_count{lang="python"} 1`,
			`sandq_job_phase_seconds_count{phase="acquire"} 1`,
			`sandq_pool_containers{pool="python-256m",state="idle"} 1`,
			`sandq_pool_containers{pool="python-256m",state="busy"} 2`,
			`sandq_containers 3`,
			`sandq_tenant_queue_wait_seconds_count{tenant="acme"} 2`,
			`sandq_tenant_queue_wait_seconds_sum{tenant="acme"} 5`,
			`sandq_tenant_running_jobs{tenant="acme"} 1`,
			`go_goroutines `,
			`process_start_time_seconds `,
		} {
			require.Contains(t, body, want)
		}
		require.NotContains(t, body, `sandq_tenant_running_jobs{tenant="gone"}`, "a tenant with nothing running has no series")
	})

	t.Run("Health", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		code, body := get(t, b.url+"/healthz")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "ok\n", body)

		b.mu.Lock()
		b.health = errors.New("redis: connection refused")
		b.mu.Unlock()
		code, body = get(t, b.url+"/healthz")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "redis: connection refused\n", body)
	})
}
