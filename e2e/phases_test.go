package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// phaseStats scrapes a worker's sandq_job_phase_seconds: count and sum per
// phase.
func phaseStats(addr string) (map[string]uint64, map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	counts, sums := map[string]uint64{}, map[string]float64{}
	f := fams["sandq_job_phase_seconds"]
	if f == nil {
		return nil, nil, fmt.Errorf("no sandq_job_phase_seconds")
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == "phase" {
				counts[l.GetValue()] += m.GetHistogram().GetSampleCount()
				sums[l.GetValue()] += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return counts, sums, nil
}

// TestJobPhaseMetrics: every job's time is broken down on the worker's
// /metrics (sandq_job_phase_seconds by phase), the scrubs between jobs
// too, and the program's own run time is within the agent's round trip.
func TestJobPhaseMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := freeAddr(t)
	e.startWorker("--concurrency", "1", "--metrics-addr", addr)
	const n = 5
	for i := range n {
		r := e.wait(e.enqueue(py(fmt.Sprintf("print(%d)", i))), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	}
	var counts map[string]uint64
	var sums map[string]float64
	require.Eventually(t, func() bool {
		var err error
		counts, sums, err = phaseStats(addr)
		// store_result is counted after the result is stored, so after
		// the test may have read it.
		return err == nil && counts["scrub"] >= n-1 && counts["store_result"] >= n
	}, 30*time.Second, 100*time.Millisecond, "the scrubs between the jobs and the last result's storing are counted")
	for _, phase := range []string{"queue_wait", "start", "plan", "acquire", "agent", "run", "store_result"} {
		require.Equal(t, uint64(n), counts[phase], "phase %s", phase)
	}
	require.Zero(t, counts["install"], "no libraries")
	require.Less(t, sums["run"], sums["agent"], "the steps' time is part of the agent's round trip")
	for phase, c := range counts {
		t.Logf("%-12s %d × mean %.2f ms", phase, c, sums[phase]/float64(c)*1000)
	}
}
