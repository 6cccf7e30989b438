package sandbox_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
)

// TestScrubMemoryBounded: what the agent spends scrubbing a container does
// not grow with what the job made, and does not stay. A job leaves 250,000
// empty files with 240-byte names in the work dir; after the scrub, the
// next job in the same container finds the agent (PID 1) small, and can
// use the memory and disk its limits give it. The agent used to hold
// every name of a scrubbed directory at once (~200 MB for 300,000), for
// long enough that such a next job ended oom. The work dir is 1 GiB: under
// Docker its inode count is one a page (262,144).
//
// Not parallel: making 300,000 files loads the machine (gVisor's most), and
// the parallel tests' jobs that race their limits (the agent's memory
// watchdog against a job growing 125 MiB/s) must not run beside it.
func TestScrubMemoryBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{limits: jobs.Limits{MemoryMB: 256, DiskMB: 1024}})
		long := func(s *agent.Step) { s.Timeout = 2 * time.Minute }
		ctx := context.Background()
		c, err := tb.pool.Acquire(ctx, tb.spec)
		require.NoError(t, err)
		st := tb.runIn(t, c, `
import os
for i in range(250000):
    os.close(os.open('%0240d' % i, os.O_CREAT | os.O_WRONLY, 0o600))
print('made')
`, long)
		require.Equal(t, "made\n", stdout(st), stderr(st))
		id := c.ID
		tb.pool.Release(c, true)

		// MaxTotal is 1: the next job gets the same container once it is clean.
		c, err = tb.pool.Acquire(ctx, tb.spec)
		require.NoError(t, err)
		require.Equal(t, id, c.ID)
		st = tb.runIn(t, c, `
for line in open('/proc/1/status'):
    if line.startswith('VmRSS:'):
        print(line.split()[1])
`)
		rss, err := strconv.Atoi(strings.TrimSpace(stdout(st)))
		require.NoError(t, err, "stdout %q stderr %s", stdout(st), stderr(st))
		t.Logf("%s: agent VmRSS after scrubbing 250,000 files: %d kB", backend, rss)
		require.Less(t, rss, 40<<10, "the agent holds what the scrub read")

		tb.pool.Release(c, true)
		if backend == "gvisor" {
			// Under gVisor the job's tmpfs files are the sentry's memory
			// too, and the job below lost its sandbox ("agent connection
			// lost") with the agent at 20 MB: not the scrub's doing.
			return
		}

		// A job using what its limits give it: 240 MB of files and 150 MB of
		// memory (of 256), at the job's own limit as the worker runs every
		// job.
		c, err = tb.pool.Acquire(ctx, tb.spec)
		require.NoError(t, err)
		defer tb.pool.Release(c, true)
		require.Equal(t, id, c.ID)
		req := tb.withJobLimit(tb.py(`
for i in range(4):
    with open('f%d' % i, 'wb') as f:
        f.write(b'x' * (60 << 20))
b = bytearray(150 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print('ok')
`, long))
		res, err := c.Run(ctx, req)
		require.NoError(t, err)
		require.Len(t, res.Steps, 1, "files error: %s", res.FilesError)
		st = res.Steps[0]
		require.False(t, st.OOMKilled, "stderr %s", stderr(st))
		require.Equal(t, "ok\n", stdout(st), stderr(st))
	})
}

// TestKernelMemoryCharged: the kernel memory a job's files hold counts
// against the job's memory. Hard links to one empty file take no size in
// the work dir, but each pins a name in the kernel (about 700 bytes with a
// 240-byte name); a job making them at its own memory limit (64 MiB) ends
// OOM-killed on every backend, as one allocating that much would. Under
// Docker each tmpfs mount has an inode count too (one a page), which a job
// with no memory limit of its own meets as ENOSPC.
//
// Not parallel, as TestScrubMemoryBounded: gVisor's kernel making 140,000
// links loads the machine, and beside it a parallel test's job racing its
// limit (TestPrestartRubyJobLimits) outran the watchdog and lost its
// sandbox to the host's OOM killer.
func TestKernelMemoryCharged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{limits: jobs.Limits{MemoryMB: 64, DiskMB: 256}})
		long := func(s *agent.Step) { s.Timeout = 2 * time.Minute }
		links := `
import os, errno
open('a', 'w').close()
n = 0
try:
    for n in range(1000000):
        os.link('a', '%0240d' % n)
        if n % 1000 == 0:
            print(n, flush=True)
except OSError as e:
    print('stopped', n, errno.errorcode[e.errno], flush=True)
`
		st := tb.runReq(t, tb.withJobLimit(tb.py(links, long)))
		lines := strings.Fields(stdout(st))
		require.NotEmpty(t, lines, "stderr %s", stderr(st))
		t.Logf("%s: killed after %s links, %v", backend, lines[len(lines)-1], time.Duration(st.WallNs))
		require.True(t, st.OOMKilled, "exit %d signal %d, stdout tail %q, stderr %s", st.ExitCode, st.Signal, lines[max(len(lines)-2, 0):], stderr(st))
		require.Equal(t, 9, st.Signal)
		made, err := strconv.Atoi(lines[len(lines)-1])
		require.NoError(t, err)
		// 64 MiB at 700 bytes a link is 96,000: the charge (1 KiB) kills
		// sooner, under gVisor the sentry's heap (about 400 bytes a link).
		require.Less(t, made, 200000, "links made before the kill")

		if backend != "docker" {
			return
		}
		// No limit of the job's own: the mount's inode count stops it.
		st = tb.run(t, links, long)
		out := stdout(st)
		require.Contains(t, out, "stopped", "stderr %s", stderr(st))
		f := strings.Fields(out[strings.LastIndex(out, "stopped"):])
		require.Equal(t, "ENOSPC", f[2])
		n, err := strconv.Atoi(f[1])
		require.NoError(t, err)
		require.InDelta(t, 256<<20/4096, n, 16, "links made before ENOSPC: the work dir's inode count")
	})
}
