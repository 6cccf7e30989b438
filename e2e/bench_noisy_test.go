package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/api"
	"github.com/sandq/sandq/jobs"
)

// BenchmarkNoisyNeighbour is `make noisy-neighbour`: one tenant's attacks
// on the others, on loopback, bounded, each figure against its target.
//
//  1. Fair share. Tenant B sends single jobs (print, one after another)
//     and its queue wait (admission to start, Result.StartedAt -
//     EnqueuedAt) is measured alone, then while tenant A floods 5,000
//     critical 2-second jobs, on one 4-slot worker. It prints
//     noisy_p99/quiet_p99: B's p99 under the flood over its p99 alone,
//     each plus one of A's jobs' run time (the median of A's, start to
//     finish); the target is at most 2.
//  2. Slow readers. 200 clients of four tenants ask for a 16 MiB session
//     file and never read it (a 4 KiB receive buffer; each holds its
//     connection 15 s, or asks again 100 ms after a refusal) for 20 s; it
//     prints the API process's peak RSS, api_rss_mb_slow_readers; the
//     target is 256 MB.
//  3. Result streams. 1,000 GET /v1/batches/{id}/results held open on a
//     batch still running; it prints Redis's connected clients (a private
//     redis-server: every client is one of this benchmark's processes:
//     the API, the worker, the benchmark's own pool),
//     redis_clients_result_streams; the target is 2 x (1 API + 1 worker)
//     + 50.
//
// SANDQ_NOISY_FLOOD (default 5000) and SANDQ_NOISY_SAMPLES (default 200,
// so that p99 is not the single worst job) size the first part.
func BenchmarkNoisyNeighbour(b *testing.B) {
	flood, samples := envInt("SANDQ_NOISY_FLOOD", 5000), envInt("SANDQ_NOISY_SAMPLES", 200)
	for range b.N {
		quiet, noisy, run := fairShare(b, flood, samples)
		x := (noisy.Seconds() + run.Seconds()) / (quiet.Seconds() + run.Seconds())
		fmt.Printf("fair share: quiet_p99 %s, noisy_p99 %s, run %s: %.2f\n", quiet, noisy, run, x)
		rss := slowReaders(b)
		fmt.Printf("slow readers: api_rss_mb %.0f\n", rss)
		clients := resultStreams(b)

		fmt.Printf("\nnoisy neighbour (B's single jobs; A floods %d critical 2 s jobs; one 4-slot worker; %d samples each)\n", flood, samples)
		fmt.Printf("quiet_p99 %.3f s, noisy_p99 %.3f s, A's job run time %.3f s\n", quiet.Seconds(), noisy.Seconds(), run.Seconds())
		fmt.Printf("noisy_p99/quiet_p99 %.2f (target <= 2)\n", x)
		fmt.Printf("api_rss_mb_slow_readers %.0f (target <= 256)\n", rss)
		fmt.Printf("redis_clients_result_streams %d (target <= %d)\n", clients, 2*2+50)
		b.ReportMetric(x, "noisy/quiet_p99")
		b.ReportMetric(rss, "api_rss_MB")
		b.ReportMetric(float64(clients), "redis_clients")
		if x > 2 {
			b.Errorf("noisy_p99/quiet_p99 %.2f > 2", x)
		}
		if rss > 256 {
			b.Errorf("api_rss_mb_slow_readers %.0f > 256", rss)
		}
		if clients > 2*2+50 {
			b.Errorf("redis_clients_result_streams %d > %d", clients, 2*2+50)
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fairShare returns B's queue-wait p99 alone and under A's flood, and the
// median run time of A's jobs.
func fairShare(b *testing.B, flood, samples int) (quiet, noisy, run time.Duration) {
	r := startRedis(b, "--appendonly", "no")
	e := newEnvAt(b, r.addr())
	w := e.startWorker("--concurrency", "4", "--min-idle", "4", "--max-per-pool", "4")
	ctx := context.Background()
	require.Eventually(b, func() bool {
		n, err := e.client.Store().FleetSlots(ctx)
		return err == nil && n == 4
	}, 30*time.Second, 50*time.Millisecond, "the worker registers its slots")

	waits := func() []time.Duration {
		var out []time.Duration
		for range samples {
			j := py("print(1)")
			j.Tenant = "quiet"
			res := e.wait(e.enqueue(j), 2*time.Minute)
			require.Equal(b, jobs.StatusSucceeded, res.Status, "%s: %s", res.Status, res.Reason)
			out = append(out, res.StartedAt.Sub(res.EnqueuedAt))
		}
		return out
	}
	quiet = p99(waits())

	var floodIDs []string
	for len(floodIDs) < flood {
		var js []jobs.Job
		for range min(500, flood-len(floodIDs)) {
			j := py("import time\ntime.sleep(2)")
			j.Tenant, j.Queue = "noisy", jobs.QueueCritical
			js = append(js, j)
		}
		infos, err := e.client.EnqueueBatch(ctx, js)
		require.NoError(b, err)
		for _, in := range infos {
			floodIDs = append(floodIDs, in.ID)
		}
	}
	// A's jobs hold every slot before B starts.
	require.Eventually(b, func() bool {
		u, err := e.client.Store().Usage(ctx, "noisy")
		return err == nil && u.Running >= 4
	}, time.Minute, 50*time.Millisecond)
	time.Sleep(3 * time.Second)
	noisy = p99(waits())

	var runs []time.Duration
	for _, id := range floodIDs[:40] {
		res, err := e.client.Get(ctx, id)
		if err == nil && res.Status == jobs.StatusSucceeded {
			runs = append(runs, res.FinishedAt.Sub(res.StartedAt))
		}
	}
	require.NotEmpty(b, runs, "some of A's jobs ran")
	slices.Sort(runs)
	run = runs[len(runs)/2]
	w.signal(syscall.SIGKILL) // the rest of the flood is not run; its containers go at the cleanup
	return quiet, noisy, run
}

// p99 is the nearest-rank 99th percentile.
func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*99+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)]
}

// slowReaders returns the API's peak RSS in MB while 200 clients of four
// tenants hold 16 MiB session-file downloads unread.
func slowReaders(b *testing.B) float64 {
	r := startRedis(b, "--appendonly", "no")
	e := newEnvAt(b, r.addr())
	e.startWorker("--concurrency", "1", "--max-sessions", "4")
	a := e.startAPI()
	host := strings.TrimPrefix(a.url, "http://")
	var keys []string
	for i := range 4 {
		key := e.apiKey(fmt.Sprintf("reader-%d", i), "--rate", "100000")
		keys = append(keys, key)
		require.Equal(b, 201, call(b, "POST", a.url+"/v1/sessions", key, map[string]any{"id": "s", "lang": "python"}, nil).StatusCode)
		var cell jobs.CellResult
		require.Equal(b, 200, call(b, "POST", a.url+"/v1/sessions/s/cells", key, map[string]any{"code": "open('big.bin','wb').write(b'x' * (16 << 20))"}, &cell).StatusCode)
		require.Equal(b, jobs.CellOK, cell.Status, "%+v", cell)
	}
	resp := call(b, "GET", a.url+"/v1/sessions/s/files/big.bin", keys[0], nil, nil)
	require.Equal(b, 200, resp.StatusCode)
	require.Equal(b, int64(16<<20), resp.ContentLength)
	resp.Body.Close()
	b.Logf("API RSS before the readers: %d KiB", rssKB(a.cmd.Process.Pid))

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), rssKB(a.cmd.Process.Pid)))
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	deadline := time.Now().Add(20 * time.Second)
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		key := keys[i%len(keys)]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				conn, err := dialer.Dial("tcp", host)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				fmt.Fprintf(conn, "GET /v1/sessions/s/files/big.bin HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, key)
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				status, _ := bufio.NewReaderSize(conn, 16).ReadString('\n')
				if strings.Contains(status, " 200 ") {
					served.Add(1)
					time.Sleep(min(15*time.Second, time.Until(deadline))) // never read
				} else {
					refused.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
				conn.Close()
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	b.Logf("API RSS after the readers: %d KiB", rssKB(a.cmd.Process.Pid))
	b.Logf("slow readers: %d downloads begun, %d refused", served.Load(), refused.Load())
	require.Positive(b, served.Load(), "some downloads were served")
	return float64(peak.Load()) / 1024
}

// rssKB is process pid's resident set, in KiB.
func rssKB(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// resultStreams returns Redis's connected clients while 1,000 batch
// result streams are open on one API process.
func resultStreams(b *testing.B) int {
	r := startRedis(b, "--appendonly", "no")
	e := newEnvAt(b, r.addr())
	e.startWorker("--concurrency", "1")
	a := e.startAPI()
	key := e.apiKey("streams", "--rate", "100000")
	var created api.BatchCreated
	require.Equal(b, 201, call(b, "POST", a.url+"/v1/batches", key,
		[]map[string]any{{"lang": "python", "code": "import time\ntime.sleep(300)"}}, &created).StatusCode)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1100}}
	var open, failed atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/batches/"+created.ID+"/results", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := httpc.Do(req)
			if err != nil || resp.StatusCode != 200 {
				failed.Add(1)
				return
			}
			defer resp.Body.Close()
			open.Add(1)
			buf := make([]byte, 512)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
			}
		})
	}
	require.Eventually(b, func() bool { return open.Load()+failed.Load() == 1000 }, 2*time.Minute, 50*time.Millisecond)
	require.Zero(b, failed.Load(), "every stream opens")
	time.Sleep(time.Second) // let any connection a stream would open appear
	rdb := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "clients").Result()
	require.NoError(b, err)
	n := 0
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	require.Positive(b, n)
	cancel()
	wg.Wait()
	return n - 1 // not this INFO's own connection
}
