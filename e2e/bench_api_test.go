package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/api"
	"github.com/sandq/sandq/jobs"
)

// BenchmarkAPI compares the HTTP API with the Go client in one run, over
// the same worker: the throughput of print(1) jobs submitted and waited
// for by 4 concurrent producers (Go: Enqueue then Wait; API: POST
// /v1/jobs?wait=60s with a key, so authentication, rate counting and the
// tenant's admission are all paid), alternating twice each; then the
// latency of one job at a time, Go and API interleaved job by job, whose
// p50 difference is what the API adds. SANDQ_BENCH_JOBS sets the jobs per
// throughput round (default 400).
func BenchmarkAPI(b *testing.B) {
	n := 400
	if v, err := strconv.Atoi(os.Getenv("SANDQ_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(b)
	e.startWorker("--concurrency", "2", "--min-idle", "2", "--max-per-pool", "2")
	a := e.startAPI()
	key := e.apiKey("bench", "--rate", "1000000", "--max-queued", "1000000")
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	body, err := json.Marshal(map[string]any{"lang": "python", "code": "print(1)"})
	require.NoError(b, err)

	viaGo := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		info, err := e.client.Enqueue(ctx, py("print(1)"))
		if err == nil {
			err = info.Err
		}
		if err != nil {
			return err
		}
		r, err := e.client.Wait(ctx, info.ID)
		if err == nil && (r.Status != jobs.StatusSucceeded || r.Stdout != "1\n") {
			err = fmt.Errorf("job %s: %s %q", r.ID, r.Status, r.Stdout)
		}
		return err
	}
	viaAPI := func() error {
		req, err := http.NewRequest("POST", a.url+"/v1/jobs?wait=60s", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var v api.JobView
		if resp.StatusCode != 200 || json.Unmarshal(data, &v) != nil || v.Status != jobs.StatusSucceeded || v.Stdout != "1\n" {
			return fmt.Errorf("API: %d %s", resp.StatusCode, data)
		}
		return nil
	}
	round := func(n int, submit func() error) float64 {
		work := make(chan struct{}, n)
		for range n {
			work <- struct{}{}
		}
		close(work)
		errs := make(chan error, 4)
		var wg sync.WaitGroup
		start := time.Now()
		for range 4 {
			wg.Go(func() {
				for range work {
					if err := submit(); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		require.NoError(b, <-errs)
		return float64(n) / time.Since(start).Seconds()
	}

	round(n/4, viaAPI) // warm up both paths
	round(n/4, viaGo)
	b.ResetTimer()
	var goRate, apiRate []float64
	for range 2 {
		goRate = append(goRate, round(n, viaGo))
		apiRate = append(apiRate, round(n, viaAPI))
	}
	var goLat, apiLat []time.Duration
	for range 100 {
		for _, p := range []struct {
			submit func() error
			into   *[]time.Duration
		}{{viaGo, &goLat}, {viaAPI, &apiLat}} {
			start := time.Now()
			require.NoError(b, p.submit())
			*p.into = append(*p.into, time.Since(start))
		}
	}
	b.StopTimer()
	slices.Sort(goLat)
	slices.Sort(apiLat)
	mean := func(v []float64) float64 { return (v[0] + v[1]) / 2 }
	p50 := func(v []time.Duration) time.Duration { return v[len(v)/2] }
	added := p50(apiLat) - p50(goLat)
	fmt.Printf("api, print(1) x %d at 4 producers: Go client %.1f jobs/s (%.1f, %.1f), API %.1f jobs/s (%.1f, %.1f): API/Go %.3f (target >= 0.9)\n",
		n, mean(goRate), goRate[0], goRate[1], mean(apiRate), apiRate[0], apiRate[1], mean(apiRate)/mean(goRate))
	fmt.Printf("api, one job at a time (100 each, interleaved): p50 Go client %s, API %s: the API adds %s (target <= 3 ms)\n",
		p50(goLat).Round(10*time.Microsecond), p50(apiLat).Round(10*time.Microsecond), added.Round(10*time.Microsecond))
	b.ReportMetric(mean(apiRate)/mean(goRate), "api/go_jobs/s")
	b.ReportMetric(float64(added.Microseconds())/1000, "api_added_p50_ms")
}
