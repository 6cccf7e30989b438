package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandq/sandq/client"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// liveOut reassembles a stream's entries per step/stream, checking each
// stream's entries come in order, and returns the bytes (dropped bytes as
// zeros), the dropped count and whether the stream hit its limit.
type liveOut struct {
	data    map[string][]byte
	dropped map[string]int64
	limit   map[string]bool
	end     jobs.Status
}

func readLive(t *testing.T, c *client.Client, id, after string, d time.Duration) liveOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	o := liveOut{data: map[string][]byte{}, dropped: map[string]int64{}, limit: map[string]bool{}}
	for e, err := range c.Stream(ctx, id, after) {
		require.NoError(t, err)
		if e.End() {
			o.end = e.Status
			break
		}
		key := e.Step + "/" + e.Stream
		require.False(t, o.limit[key], "nothing after a stream's limit entry")
		require.Equal(t, int64(len(o.data[key]))+e.Dropped, e.Offset, "%s: entries in order, offsets consistent", key)
		o.data[key] = append(o.data[key], make([]byte, e.Dropped)...)
		o.data[key] = append(o.data[key], e.Data...)
		o.dropped[key] += e.Dropped
		o.limit[key] = o.limit[key] || e.Limit
	}
	return o
}

// TestFollowShowsOutputWhileTheJobRuns: a program printing a line every
// 200 ms for 2 s, through `enqueue run --follow`: its first line reaches
// the CLI's stdout while the job is still running (order, not wall time),
// every line arrives, then the status line and the job's exit status.
func TestFollowShowsOutputWhileTheJobRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1")
	id := "follow-" + jobs.NewID()[:8]
	// After line 0 the job waits 8 s: the test reads its status while it
	// runs, however slowly the first line comes through.
	cmd := e.enqueueCmd("run", "--follow", "--lang", "python", "--timeout", "60s", "--id", id, "-")
	cmd.Stdin = strings.NewReader("import time, sys\nfor i in range(10):\n    print('line', i, flush=True)\n    print('err', i, file=sys.stderr, flush=True)\n    time.sleep(8 if i == 0 else 0.2)\n")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "a first line")
	require.Equal(t, "line 0", sc.Text())
	r, err := e.client.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, jobs.StatusRunning, r.Status, "the first line arrived while the job ran")
	lines := []string{sc.Text()}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, cmd.Wait(), stderr.String())
	want := make([]string, 10)
	wantErr := ""
	for i := range want {
		want[i] = fmt.Sprintf("line %d", i)
		wantErr += fmt.Sprintf("err %d\n", i)
	}
	require.Equal(t, want, lines)
	require.True(t, strings.HasPrefix(stderr.String(), wantErr), "stderr to stderr, in order: %q", stderr.String())
	require.Contains(t, stderr.String(), "sandq: job "+id+" succeeded")
}

// TestLiveOutputLateReaders: a reader that joins while the job runs and one
// that joins after it ended both see every byte, stdout and stderr each in
// order, binary bytes exact; `enqueue logs` prints the same.
func TestLiveOutputLateReaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1")
	job := py(`
import sys, time
out, err = sys.stdout.buffer, sys.stderr.buffer
for i in range(40):
    out.write(bytes([i, 0xff, 0x00, 0x80]) * 500)
    out.flush()
    err.write(b'e%d\n' % i)
    err.flush()
    time.sleep(0.05)
`)
	job.Stream = true
	var wantOut, wantErr []byte
	for i := range 40 {
		wantOut = append(wantOut, bytes.Repeat([]byte{byte(i), 0xff, 0x00, 0x80}, 500)...)
		wantErr = append(wantErr, fmt.Sprintf("e%d\n", i)...)
	}
	id := e.enqueue(job)
	e.waitRunning(id, time.Minute)
	time.Sleep(300 * time.Millisecond) // some output is out already
	during := readLive(t, e.client, id, "", time.Minute)
	require.Equal(t, jobs.StatusSucceeded, during.end)
	after := readLive(t, e.client, id, "", time.Minute)
	for _, o := range []liveOut{during, after} {
		require.True(t, bytes.Equal(wantOut, o.data["run/stdout"]), "stdout: %d bytes of %d", len(o.data["run/stdout"]), len(wantOut))
		require.Equal(t, string(wantErr), string(o.data["run/stderr"]))
		require.Zero(t, o.dropped["run/stdout"]+o.dropped["run/stderr"])
	}
	r := e.wait(id, time.Minute)
	out, err := r.StdoutBytes()
	require.NoError(t, err)
	require.True(t, bytes.Equal(wantOut, out), "the Result is the same as without streaming")

	cmd := e.enqueueCmd("logs", id)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.True(t, bytes.Equal(wantOut, stdout.Bytes()))
	require.True(t, strings.HasPrefix(stderr.String(), string(wantErr)))
}

// TestLiveOutputLimit: output past output_bytes stops the stream with its
// limit entry; the Result keeps head and tail as always. A compiled
// language's compile output streams too.
func TestLiveOutputLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("--concurrency", "1")
	job := py("import sys\nfor i in range(20000):\n    print('%05d' % i)\nsys.stderr.write('done\\n')")
	job.Stream = true
	job.Limits.OutputBytes = 10_000
	id := e.enqueue(job)
	o := readLive(t, e.client, id, "", time.Minute)
	require.Equal(t, jobs.StatusOutputLimit, o.end)
	require.True(t, o.limit["run/stdout"])
	require.Len(t, o.data["run/stdout"], 10_000, "exactly output_bytes streamed")
	var want strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&want, "%05d\n", i)
	}
	require.Equal(t, want.String()[:10_000], string(o.data["run/stdout"]))
	require.Equal(t, "done\n", string(o.data["run/stderr"]))
	require.False(t, o.limit["run/stderr"])
	r := e.wait(id, time.Minute)
	require.True(t, r.StdoutTruncated)
	require.True(t, strings.HasSuffix(r.Stdout, "19999\n"), "the Result keeps the tail")

	c := jobs.Job{Lang: "c", Code: "#warning \"from the compiler\"\n#include <stdio.h>\nint main(){puts(\"hi\");}", Stream: true}
	o = readLive(t, e.client, e.enqueue(c), "", 2*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, o.end)
	require.Contains(t, string(o.data["compile/stderr"]), "from the compiler")
	require.Equal(t, "hi\n", string(o.data["run/stdout"]))
}

// TestLiveOutputRedisRestart: Redis restarts while a streamed job runs.
// The job is not held up by it and ends with its normal result; the
// stream says what it lost, and a reader ends at the final status.
func TestLiveOutputRedisRestart(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	e := newEnvAt(t, r.addr())
	e.startWorker("--concurrency", "1")
	job := py("import time\nfor i in range(30):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\n")
	job.Stream = true
	id := e.enqueue(job)
	e.waitRunning(id, time.Minute)
	require.Eventually(t, func() bool {
		n, err := e.rdb.XLen(context.Background(), e.client.Store().StreamKey(id)).Result()
		return err == nil && n > 0
	}, time.Minute, 10*time.Millisecond, "the stream has started")
	r.restart()
	res := e.wait(id, 2*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, res.Status, res.Reason)
	require.Equal(t, 1, res.Attempts)
	var want strings.Builder
	for i := range 30 {
		fmt.Fprintf(&want, "tick %d\n", i)
	}
	require.Equal(t, want.String(), res.Stdout, "the Result is whole")
	o := readLive(t, e.client, id, "", time.Minute)
	require.Equal(t, jobs.StatusSucceeded, o.end)
	got := o.data["run/stdout"]
	require.Len(t, got, want.Len(), "offsets account for every byte, lost ones included")
	for i := range got {
		if got[i] != 0 {
			require.Equal(t, want.String()[i], got[i], "byte %d", i)
		}
	}
}
