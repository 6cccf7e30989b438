package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
	sandqworker "github.com/sandq/sandq/worker"
)

// scrape GETs /metrics and parses it; it returns the families, or an
// error for anything but a 200 with valid exposition text.
func scrape(addr string) (map[string]int, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	pools := map[string]int{}
	if f := fams["sandq_pool_containers"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "pool" {
					pools[l.GetValue()] += int(m.GetGauge().GetValue())
				}
			}
		}
	}
	return pools, nil
}

// TestBoundedPoolKeys: 200 jobs with 100 distinct limit and tenant
// combinations on one worker. The worker's containers never pass
// --max-containers (sampled on the engine throughout), /metrics answers
// 200 with valid exposition text throughout (keys differing only in pids,
// which the old pool label left out, made every scrape fail), and once
// idle past --idle-timeout only the warm key's container remains.
func TestBoundedPoolKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := freeAddr(t)
	const maxContainers = 4
	w := e.startWorker("--concurrency", "2", "--max-containers", fmt.Sprint(maxContainers), "--idle-timeout", "3s",
		"--warm", "python", "--min-idle", "1", "--metrics-addr", addr)

	var (
		mu       sync.Mutex
		peak     int
		scrapes  int
		failures []string
	)
	ctx, stop := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			cs, err := e.rt.List(ctx, map[string]string{sandbox.LabelOwner: w.owner})
			_, serr := scrape(addr)
			mu.Lock()
			if err == nil {
				peak = max(peak, len(cs))
			}
			scrapes++
			if serr != nil {
				failures = append(failures, serr.Error())
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	var ids []string
	for i := range 200 {
		k := i % 100
		job := py(fmt.Sprintf("print(%d)", i))
		job.Tenant = fmt.Sprintf("tenant-%d", k%10)
		job.Limits.Pids = int64(32 + k/10) // ten keys per tenant that differ only in pids
		ids = append(ids, e.enqueue(job))
	}
	for i, id := range ids {
		r := e.wait(id, 5*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
		require.Equal(t, fmt.Sprintf("%d\n", i), r.Stdout)
	}
	stop()
	<-sampled
	mu.Lock()
	t.Logf("peak containers %d (cap %d), %d scrapes", peak, maxContainers, scrapes)
	require.Empty(t, failures, "/metrics failed during the run")
	require.Greater(t, scrapes, 10)
	require.LessOrEqual(t, peak, maxContainers, "the worker's containers never pass --max-containers")
	require.Positive(t, peak)
	mu.Unlock()

	// Idle: the 100 keys go, the warm key keeps its one container.
	var pools map[string]int
	require.Eventually(t, func() bool {
		var err error
		pools, err = scrape(addr)
		return err == nil && len(pools) == 1 && len(e.containers(w.owner)) == 1
	}, time.Minute, 200*time.Millisecond, "after --idle-timeout only the warm key remains")
	warm := e.containers(w.owner)[0]
	require.Contains(t, pools, warm.Labels[sandbox.LabelPool], "the remaining container is the warm key's")
	require.Equal(t, 1, pools[warm.Labels[sandbox.LabelPool]])
}

// largeOutput writes 16 MiB of binary (not UTF-8) stdout and 16 MiB of
// stderr: both streams at the output_bytes cap.
const largeOutput = `
import sys
b = bytes(range(256)) * (16 * 1024 * 1024 // 256)
sys.stdout.buffer.write(b)
sys.stderr.buffer.write(b[::-1])
`

// TestLargeOutputResultCap: programs writing 16 MiB of binary stdout and
// stderr at the caps leave results within --max-result-bytes: the streams
// moved to the artifact store, byte-exact, the result keeping their heads
// and naming them. A batch waiting on them with one WaitEach connection
// is not disconnected (the done message carries only the status, never
// the result: Redis's pub/sub buffer limit is 32 MB).
func TestLargeOutputResultCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "2")

	want := bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 16<<20/256)
	big := py(largeOutput)
	big.Limits.OutputBytes = 16 << 20
	big.Limits.TimeoutMS = 60_000
	var ids []string
	for i := range 6 {
		j := big
		if i%2 == 1 {
			j = py(fmt.Sprintf("print('small %d')", i))
		}
		ids = append(ids, e.enqueue(j))
	}
	ch := make(chan string, len(ids))
	for _, id := range ids {
		ch <- id
	}
	close(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := map[string]jobs.Result{}
	require.NoError(t, e.client.WaitEach(ctx, ch, func(r jobs.Result) error {
		got[r.ID] = r
		return nil
	}), "one WaitEach connection sees every result")
	require.Len(t, got, len(ids))

	for i, id := range ids {
		r := got[id]
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		size, err := e.rdb.StrLen(context.Background(), e.client.Store().ResultKey(id)).Result()
		require.NoError(t, err)
		require.LessOrEqual(t, size, int64(sandqworker.DefaultMaxResultBytes), "stored result within the cap")
		if i%2 == 1 {
			require.Equal(t, fmt.Sprintf("small %d\n", i), r.Stdout)
			require.Empty(t, r.Artifacts)
			continue
		}
		require.EqualValues(t, 16<<20, r.StdoutTotalBytes)
		require.False(t, r.StdoutTruncated)
		require.Equal(t, ".sandq/stdout", r.StdoutArtifact)
		require.Equal(t, ".sandq/stderr", r.StderrArtifact)
		head, err := r.StdoutBytes()
		require.NoError(t, err)
		require.Equal(t, want[:len(head)], head, "the result keeps the stream's head")
		byName := map[string]jobs.Artifact{}
		for _, a := range r.Artifacts {
			byName[a.Name] = a
		}
		for name, stream := range map[string][]byte{".sandq/stdout": want, ".sandq/stderr": reversed(want)} {
			a := byName[name]
			require.Equal(t, "output", a.Kind, name)
			require.EqualValues(t, len(stream), a.Size)
			data, err := os.ReadFile(a.URL) // the local store's URL is the file's path
			require.NoError(t, err)
			require.Equal(t, sha256.Sum256(stream), sha256.Sum256(data), "%s stored byte-exact", name)
		}
	}
}

func reversed(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[len(b)-1-i] = c
	}
	return out
}
