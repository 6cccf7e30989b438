package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// BenchmarkSessions measures sessions beside one-shot jobs, in one run on
// one worker: a cell round trip for `x += 1` through the Go client (target
// p50 <= 5 ms), a session create with a warm pool, and a one-shot print(1)
// job enqueued and waited for (the baseline).
func BenchmarkSessions(b *testing.B) {
	e := newEnv(b)
	e.startWorker("--concurrency", "1", "--max-sessions", "4", "--warm-sessions", "python")
	ctx := context.Background()
	p50 := func(v []time.Duration) time.Duration { slices.Sort(v); return v[len(v)/2] }
	p99 := func(v []time.Duration) time.Duration { slices.Sort(v); return v[len(v)*99/100] }

	// Session creates, each on a warm container: the pool refills one
	// in the background after each take, so wait for it between creates.
	var creates []time.Duration
	for i := range 11 {
		time.Sleep(1500 * time.Millisecond)
		start := time.Now()
		s, err := e.client.OpenSession(ctx, jobs.SessionSpec{Lang: "python"})
		require.NoError(b, err)
		if i > 0 { // the first may race the boot-time warm-up
			creates = append(creates, time.Since(start))
		}
		require.NoError(b, s.Close(ctx))
	}

	s, err := e.client.OpenSession(ctx, jobs.SessionSpec{Lang: "python"})
	require.NoError(b, err)
	defer s.Close(ctx)
	_, err = s.Exec(ctx, jobs.Cell{Code: "x = 0"})
	require.NoError(b, err)
	b.ResetTimer()
	var cells, oneShot []time.Duration
	for i := range 200 {
		start := time.Now()
		r, err := s.Exec(ctx, jobs.Cell{Code: "x += 1"})
		cells = append(cells, time.Since(start))
		require.NoError(b, err)
		require.Equal(b, jobs.CellOK, r.Status, "%+v", r)
		if i%4 == 0 { // a one-shot job every fourth cell, interleaved
			start = time.Now()
			id := e.enqueue(py("print(1)"))
			res := e.wait(id, time.Minute)
			oneShot = append(oneShot, time.Since(start))
			require.Equal(b, jobs.StatusSucceeded, res.Status)
		}
	}
	// The same cell through the HTTP API (a key, the tenant's session).
	a := e.startAPI()
	key := e.apiKey("bench", "--rate", "1000000")
	httpc := &http.Client{}
	tb := testing.TB(b)
	post := func(path string, body any) (int, []byte) {
		j, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", a.url+path, bytes.NewReader(j))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpc.Do(req)
		require.NoError(tb, err)
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	code, body := post("/v1/sessions", map[string]any{"id": "bench", "lang": "python"})
	require.Equal(b, 201, code, string(body))
	code, body = post("/v1/sessions/bench/cells", map[string]any{"code": "y = 0"})
	require.Equal(b, 200, code, string(body))
	var viaHTTP []time.Duration
	for range 200 {
		start := time.Now()
		code, body := post("/v1/sessions/bench/cells", map[string]any{"code": "y += 1"})
		viaHTTP = append(viaHTTP, time.Since(start))
		require.Equal(b, 200, code, string(body))
	}
	r, err := s.Exec(ctx, jobs.Cell{Code: "x"})
	require.NoError(b, err)
	require.Equal(b, "200", r.Results[0].Data["text/plain"], "every cell ran once")
	b.StopTimer()
	fmt.Printf("sessions: cell x += 1 through the Go client: p50 %s, p99 %s (target p50 <= 5 ms), %d cells\n",
		p50(cells).Round(10*time.Microsecond), p99(cells).Round(10*time.Microsecond), len(cells))
	fmt.Printf("sessions: cell y += 1 through the HTTP API: p50 %s, p99 %s, %d cells\n",
		p50(viaHTTP).Round(10*time.Microsecond), p99(viaHTTP).Round(10*time.Microsecond), len(viaHTTP))
	fmt.Printf("sessions: create with a warm pool: p50 %s, max %s (%d creates)\n",
		p50(creates).Round(100*time.Microsecond), slices.Max(creates).Round(100*time.Microsecond), len(creates))
	fmt.Printf("sessions: one-shot print(1) job, enqueue + wait, same run: p50 %s; cell/job p50 %.3f\n",
		p50(oneShot).Round(10*time.Microsecond), float64(p50(cells))/float64(p50(oneShot)))
	b.ReportMetric(float64(p50(cells).Microseconds())/1000, "cell_p50_ms")
	b.ReportMetric(float64(p50(creates).Microseconds())/1000, "create_p50_ms")
	b.ReportMetric(float64(p50(viaHTTP).Microseconds())/1000, "http_cell_p50_ms")
}
