package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// hostileCase is a program written the way an attacker would, to hang the
// agent, exhaust what it owns, leave state for the next job or turn its own
// failure into an infrastructure error; and the status it must end with.
type hostileCase struct {
	name   string
	job    jobs.Job
	status jobs.Status
	// check looks at the result further.
	check func(t *testing.T, r jobs.Result)
	// clean is the language of the clean check that follows in the same
	// pool: "" python, "bash", or "-" for none (a job whose container is
	// discarded after it, as after an OOM kill).
	clean string
}

// hostileCases is the suite for a runtime ("docker", "podman", "gvisor").
// Every job runs as its own attempt: whatever it does to its sandbox is its
// own status, never a retry.
func hostileCases(runtime string) []hostileCase {
	gvisor := runtime == "gvisor"
	pyJob := func(code string, mods ...func(*jobs.Job)) jobs.Job {
		j := jobs.Job{Lang: "python", Code: code}
		for _, m := range mods {
			m(&j)
		}
		return j
	}
	outputs := func(globs ...string) func(*jobs.Job) { return func(j *jobs.Job) { j.OutputFiles = globs } }
	dropped := func(substr string) func(t *testing.T, r jobs.Result) {
		return func(t *testing.T, r jobs.Result) {
			t.Helper()
			require.True(t, strings.Contains(strings.Join(r.DroppedArtifacts, "\n"), substr),
				"dropped_artifacts %q lacks %q (artifacts %+v, errors %q)", r.DroppedArtifacts, substr, r.Artifacts, r.ArtifactErrors)
		}
	}
	return []hostileCase{
		{
			// The plots dir's parent is root's: the job can neither
			// replace the dir nor plant special files where the agent
			// would open them blocking; inside it, a FIFO and a link are
			// left out, never followed, never waited on.
			name: "SpecialFilesWhereCollected",
			job: pyJob(`
import os, matplotlib.pyplot as plt
d = os.environ['SANDQ_PLOTS_DIR']
for f in (lambda: os.rmdir(d), lambda: os.rename(d, '/tmp/x'), lambda: os.rmdir(os.path.dirname(d))):
    try:
        f(); print('REPLACED')
    except OSError:
        pass
os.mkfifo(d + '/fifo.png')
os.symlink('/etc/passwd', d + '/passwd.png')
os.mkfifo('pipe.csv')
os.symlink('/proc/1/environ', 'env.csv')
os.link('main.py', 'hard.csv')
plt.plot([1, 2]); plt.savefig('real.png'); plt.close('all')  # the hook copies it to the plots dir
print('planted')
`, outputs("*.csv"), func(j *jobs.Job) {
				// matplotlib's import and a savefig on gVisor with the
				// three runtimes' suites at once, as TmpfsFillThenPlot.
				j.Limits.TimeoutMS = 60_000
			}),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				require.Equal(t, "planted\n", r.Stdout)
				var names []string
				for _, a := range r.Artifacts {
					names = append(names, a.Name)
				}
				require.Equal(t, []string{"plots/plot-001.png"}, names, "only the real plot")
				all := strings.Join(r.DroppedArtifacts, "\n")
				for _, want := range []string{"plots/fifo.png: not a regular file", "plots/passwd.png: not a regular file",
					"pipe.csv: not a regular file", "env.csv: not a regular file", "hard.csv: has 2 hard links"} {
					require.Contains(t, all, want)
				}
			},
		},
		{
			name: "DeepDirectoryChain",
			job: pyJob(`
import os
for i in range(3000):
    os.mkdir('d'); os.chdir('d')
open('deep.txt', 'w').write('x')
print('deep')
`, outputs("**")),
			status: jobs.StatusSucceeded,
			check:  dropped("deeper than 32 levels"),
		},
		{
			name: "EntryFlood",
			job: pyJob(`
import os
os.mkdir('flood')
for i in range(25000):
    open('flood/%0200d' % i, 'w').close()
print('flooded')
`, outputs("flood/*"), func(j *jobs.Job) { j.Limits.TimeoutMS = 120_000 }),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				require.LessOrEqual(t, len(r.DroppedArtifacts), 21, "dropped_artifacts is bounded")
				require.Contains(t, r.DroppedArtifacts[len(r.DroppedArtifacts)-1], "more left out")
				require.Len(t, r.Artifacts, 32, "the file cap")
			},
		},
		{
			// A sparse file far past the byte cap is left out by its size;
			// one just under the cap travels whole, in chunks.
			name: "SparseAndNearCapFiles",
			job: pyJob(`
import os
with open('huge.bin', 'wb') as f:
    f.truncate(60 << 20)
with open('near.bin', 'wb') as f:
    f.truncate((32 << 20) - 4096)
print('sparse')
`, outputs("*.bin")),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				dropped("huge.bin: 62914560 bytes would exceed")(t, r)
				require.Len(t, r.Artifacts, 1)
				require.Equal(t, int64(32<<20-4096), r.Artifacts[0].Size)
			},
		},
		{
			// The only file asked for is past the cap: nothing is
			// collected, and the result still says why.
			name: "OnlyFileOverCap",
			job: pyJob(`
with open('huge.bin', 'wb') as f:
    f.truncate(60 << 20)
print('sparse')
`, outputs("*.bin")),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				dropped("huge.bin: 62914560 bytes would exceed")(t, r)
				require.Empty(t, r.Artifacts)
			},
		},
		{
			// Files in tmpfs are memory the kernel charges to the
			// container and keeps after the job's processes die: filled to
			// the brim, the agent still collects the plot and scrubs.
			name: "TmpfsFillThenPlot",
			job: pyJob(`
import os, matplotlib.pyplot as plt
plt.plot([1, 2]); plt.savefig('p.png'); plt.close('all'); os.remove('p.png')
for d in ('.', '/tmp', '/dev/shm'):
    try:
        with open(d + '/fill', 'wb') as f:
            while True:
                f.write(b'\xff' * (1 << 20))
    except OSError as e:
        print(d, 'full')
`, func(j *jobs.Job) {
				// 2.3 s alone on gVisor (ptrace), past 10 s with the
				// three runtimes' suites and the race detector at once.
				j.Limits.TimeoutMS = 60_000
			}),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				require.Equal(t, ". full\n/tmp full\n/dev/shm full\n", r.Stdout, r.Stderr)
				require.Len(t, r.Artifacts, 1)
			},
		},
		{
			// The other order: the tmpfs mounts filled first, then a
			// plot wanted where nothing is left. Whatever the plot does,
			// the next job finds its memory back.
			name: "TmpfsFillThenWritePlot",
			job: pyJob(`
import matplotlib.pyplot as plt
for d in ('.', '/tmp', '/dev/shm'):
    try:
        with open(d + '/fill', 'wb') as f:
            while True:
                f.write(b'\xff' * (1 << 20))
    except OSError as e:
        print(d, 'full')
plt.plot([1, 2]); plt.show()
`, func(j *jobs.Job) { j.Limits.TimeoutMS = 60_000 }),
			status: jobs.StatusFailed, // the plot finds no space: the job's own failure
			check: func(t *testing.T, r jobs.Result) {
				require.Equal(t, ". full\n/tmp full\n/dev/shm full\n", r.Stdout)
				require.Contains(t, r.Stderr, "No space left on device")
			},
		},
		{
			name:   "MemoryBomb",
			job:    pyJob("x = b'x' * (1 << 31)"),
			status: jobs.StatusOOM,
			clean:  "-",
		},
		{
			// Pages touched at the limit, forever: the cgroup would thrash;
			// the agent kills the job at its memory and answers.
			name: "ThrashAtTheLimit",
			job: jobs.Job{Lang: "c", Limits: jobs.Limits{MemoryMB: 64, TimeoutMS: 20_000}, Code: `
#include <stdlib.h>
#include <string.h>
int main(void) {
	size_t n = 0, step = 1 << 20;
	char **p = malloc(sizeof(char *) * 4096);
	for (;;) {
		p[n % 4096] = malloc(step);
		if (p[n % 4096]) memset(p[n % 4096], n, step);
		n++;
		for (size_t i = 0; i < n && i < 4096; i++) if (p[i]) p[i][0]++;
	}
}`},
			status: jobs.StatusOOM,
			clean:  "-",
		},
		{
			name: "WorkerThreadsFillMemory",
			job: jobs.Job{Lang: "javascript", Limits: jobs.Limits{MemoryMB: 128, TimeoutMS: 20_000}, Code: `
const { Worker } = require('worker_threads');
for (let i = 0; i < 4; i++) new Worker('const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));', { eval: true });
`},
			status: jobs.StatusOOM,
			clean:  "-",
		},
		{
			name: "OOMScoreAdjLowered",
			job: pyJob(`
import os
try:
    with open('/proc/self/oom_score_adj', 'w') as f:
        f.write('-1')
    print('LOWERED')
except OSError:
    print('refused', open('/proc/self/oom_score_adj').read().strip())
`),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				if gvisor {
					// gVisor's scores are its own kernel's and mean
					// nothing to the host's OOM killer: the agent's
					// memory watchdog decides there.
					return
				}
				require.Equal(t, "refused 1000\n", r.Stdout)
			},
		},
		{
			// A default ACL on the work dir would set the modes of the
			// next job's files; the scrub removes it.
			name: "DefaultACLOnWorkDir",
			job: pyJob(`
import os, struct
acl = struct.pack('<I', 2) + struct.pack('<HHI', 0x01, 4, 0xffffffff) + struct.pack('<HHI', 0x04, 4, 0xffffffff) + struct.pack('<HHI', 0x20, 0, 0xffffffff)
try:
    os.setxattr('/work', 'system.posix_acl_default', acl)
except OSError as e:
    print('no ACLs:', e.strerror)
    raise SystemExit
try:
    os.setxattr('/work', 'user.mark', b'1')
except OSError:
    pass
open('probe', 'w').close()
print(oct(os.stat('probe').st_mode & 0o777))
`),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				require.Equal(t, "0o440\n", r.Stdout, "the ACL took effect in this job")
			},
		},
		{
			// A closed loopback connection leaves TIME_WAIT in the
			// container's network namespace; the next job must still bind.
			name: "TCPStateLeftBehind",
			job: pyJob(`
import socket
s = socket.socket(); s.bind(('127.0.0.1', 4321)); s.listen()
c = socket.create_connection(('127.0.0.1', 4321)); a, _ = s.accept()
c.close(); a.close(); s.close()
print('closed')
`),
			status: jobs.StatusSucceeded,
		},
		{
			name: "BlockedSyscalls",
			job: pyJob(`
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
for name, args in (('io_uring_setup', (425, 8, params)), ('unshare_user', (272, 0x10000000)), ('keyctl', (250, 0, 0)), ('bpf', (321, 0, 0, 0))):
    r = libc.syscall(*args)
    print(name, 'ALLOWED' if r >= 0 else errno.errorcode[ctypes.get_errno()])
`),
			status: jobs.StatusSucceeded,
			check: func(t *testing.T, r jobs.Result) {
				// The same on gVisor: sandq's profile is in force there
				// too (runsc --oci-seccomp, checked at container start).
				require.NotContains(t, r.Stdout, "ALLOWED")
				require.Equal(t, 4, strings.Count(r.Stdout, "EPERM")+strings.Count(r.Stdout, "ENOSYS"), r.Stdout)
			},
		},
		{
			name: "ForkBomb",
			job: jobs.Job{Lang: "bash", Limits: jobs.Limits{TimeoutMS: 3000, Pids: 64},
				Code: "b() { b | b & }; b; sleep 10"},
			status: jobs.StatusTimeout,
			clean:  "bash",
		},
		{
			// At every minimum the agent still works.
			name: "MinimumLimits",
			job: jobs.Job{Lang: "bash", Code: "echo small",
				Limits: jobs.Limits{Pids: 8, Nofile: 32, MemoryMB: 16, CPUs: 0.1, DiskMB: 4, TmpMB: 4, TimeoutMS: 20_000}},
			status: jobs.StatusSucceeded,
			check:  func(t *testing.T, r jobs.Result) { require.Equal(t, "small\n", r.Stdout) },
			clean:  "bash",
		},
	}
}

// forkServerPy defines fork_server(pid): whether a process is the agent's
// Python fork server, which outlives jobs: "python3 main.py", not
// dumpable (the files in its /proc directory are root's). The agent kills anything else a
// job leaves, and the server with it.
const forkServerPy = `
def fork_server(p):
    try:
        return os.stat('/proc/%s/status' % p).st_uid == 0 and open('/proc/%s/cmdline' % p, 'rb').read() == b'python3\0main.py\0'
    except OSError:
        return False
`

// cleanCheck is a job whose output says whether its sandbox is clean:
// only the agent, the Python fork server its process may have been forked
// from (agent/prestart_linux.go) and itself running, empty /tmp and /dev/shm, a work dir
// holding only its program, no extended attributes or ACL on the work
// dir, new files with their plain modes, no socket in the network
// namespace, the loopback port of TCPStateLeftBehind free.
const cleanCheck = `
import os, socket
me = os.getpid()
bad = {}
` + forkServerPy + `
others = [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me)]
servers = [p for p in others if fork_server(p)]
pids = sorted(p for p in others if p not in servers)
if pids or len(servers) > 1: bad['pids'] = others
for d in ('/tmp', '/dev/shm'):
    # The agent's own /tmp/.sandq/plots, empty, is this job's.
    left = [f for f in os.listdir(d) if not (d == '/tmp' and f == '.sandq' and os.listdir('/tmp/.sandq') == ['plots'] and not os.listdir('/tmp/.sandq/plots'))]
    if left: bad[d] = left
if sorted(os.listdir('.')) != ['main.py']: bad['work'] = os.listdir('.')
if os.listxattr('/work'): bad['xattr'] = os.listxattr('/work')
open('probe', 'w').close()
if os.stat('probe').st_mode & 0o777 != 0o644: bad['mode'] = oct(os.stat('probe').st_mode)
os.remove('probe')
for t in ('tcp', 'tcp6', 'udp', 'unix'):
    try:
        lines = open('/proc/net/' + t).read().splitlines()[1:]
    except OSError:
        continue
    if t == 'unix' and servers:
        # The fork server's control socket: a pair of unnamed SOCK_SEQPACKET ends.
        pair = [l for l in lines if len(l.split()) == 7 and l.split()[4] == '0005'][:2]
        lines = [l for l in lines if l not in pair]
    if lines: bad['net_' + t] = len(lines)
try:
    s = socket.socket(); s.bind(('127.0.0.1', 4321)); s.close()
except OSError as e:
    bad['bind'] = str(e)
print('CLEAN' if not bad else 'DIRTY %r' % bad)
`

// bashCleanCheck is cleanCheck's core in bash builtins: processes, /tmp,
// /dev/shm and the work dir.
const bashCleanCheck = `
bad=""
for p in /proc/[0-9]*; do n=${p#/proc/}; [ "$n" = 1 ] || [ "$n" = $$ ] || bad="$bad pid:$n"; done
shopt -s nullglob dotglob
for f in /tmp/* /dev/shm/*; do [ "$f" = /tmp/.sandq ] || bad="$bad $f"; done
for f in /tmp/.sandq/plots/*; do bad="$bad $f"; done
for f in *; do [ "$f" = main.sh ] || bad="$bad work:$f"; done
if [ -z "$bad" ]; then echo CLEAN; else echo "DIRTY$bad"; fi
`

// TestHostileJobs runs the hostile suite through the queue on one worker
// per runtime (Docker, Podman, gVisor under Docker), each with one
// container per pool key: each job ends with its own status after one
// attempt, the worker survives, and the next job in that pool finds a
// clean sandbox.
func TestHostileJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, []string{"docker", "podman", "gvisor"}, func(t *testing.T, backend string) {
		e := newEnv(t)
		e.startWorkerOn(t, backend, "--concurrency", "1", "--max-per-pool", "1", "--warm", "")
		e.checkHostile(t, backend)
	})
}

// checkHostile runs hostileCases on e's worker, each followed by the clean
// check in the same pool.
func (e *env) checkHostile(t *testing.T, runtime string) {
	for _, tt := range hostileCases(runtime) {
		t.Run(tt.name, func(t *testing.T) {
			r := e.wait(e.enqueue(tt.job), 3*time.Minute)
			require.Equal(t, tt.status, r.Status, "reason %q, stderr %q", r.Reason, r.Stderr)
			require.Equal(t, 1, r.Attempts, "what a job does to its sandbox is never retried")
			if tt.check != nil {
				tt.check(t, r)
			}
			// The next job of the same pool key (same language and limits).
			next := tt.job
			next.ID, next.OutputFiles = "", nil
			switch tt.clean {
			case "-":
				return
			case "bash":
				next.Code = bashCleanCheck
			default:
				next.Code = cleanCheck
			}
			r = e.wait(e.enqueue(next), 3*time.Minute)
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			require.Equal(t, "CLEAN\n", r.Stdout, "after %s", tt.name)
		})
	}
}

// TestLimitMinimumsRefusedAtEnqueue: limits below what the agent needs are
// a ValidationError naming the field, and never reach a worker.
func TestLimitMinimumsRefusedAtEnqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for field, l := range map[string]jobs.Limits{
		"limits.pids": {Pids: 1}, "limits.nofile": {Nofile: 1}, "limits.memory_mb": {MemoryMB: 8},
		"limits.cpus": {CPUs: 0.01}, "limits.disk_mb": {DiskMB: 1}, "limits.tmp_mb": {TmpMB: 1},
	} {
		_, err := e.client.Enqueue(context.Background(), jobs.Job{Lang: "python", Code: "print(1)", Limits: l})
		var verr *jobs.ValidationError
		require.True(t, errors.As(err, &verr), "%s: %v", field, err)
		require.Equal(t, field, verr.Field, fmt.Sprint(l))
	}
}
