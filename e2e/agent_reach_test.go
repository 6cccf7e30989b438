package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// agentReachProbe is a job that tries, from its own code, everything a job
// could do to the agent (PID 1) or to the next job without leaving a file:
// each line names a try and how it ended.
const agentReachProbe = `
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def sys(name, *args):
    r = libc.syscall(*args)
    print(name, 'ALLOWED' if r >= 0 else 'refused')
sys('unshare_user', 272, 0x10000000)
sys('unshare_mount', 272, 0x00020000)
sys('unshare_pid', 272, 0x20000000)
sys('unshare_net', 272, 0x40000000)
sys('unshare_uts', 272, 0x04000000)
args = ctypes.create_string_buffer(88)
ctypes.c_uint64.from_buffer(args, 0).value = 0x10000000  # clone_args.flags: CLONE_NEWUSER
ctypes.c_uint64.from_buffer(args, 32).value = 17  # exit_signal: SIGCHLD
r = libc.syscall(435, args, 88)
if r == 0:
    os._exit(0)
print('clone3_newuser', 'ALLOWED' if r > 0 else 'refused')
sys('io_uring_setup', 425, 8, ctypes.create_string_buffer(120))
sys('syslog', 103, 3, ctypes.create_string_buffer(64), 64)
sys('setpriority_pid1', 141, 0, 1, 19)
sys('setpriority_pgrp1', 141, 1, 1, 19)
mask = ctypes.c_ulong(1)
sys('sched_setaffinity_pid1', 203, 1, ctypes.sizeof(mask), ctypes.byref(mask))
sys('ioprio_set_pid1', 251, 1, 1, (3 << 13))
sys('prlimit_pid1', 302, 1, 7, ctypes.create_string_buffer(16), 0)
sys('kill_pid1', 62, 1, 19)
try:
    open('/proc/1/mem', 'rb').read(1)
    print('/proc/1/mem', 'ALLOWED')
except OSError:
    print('/proc/1/mem', 'refused')
for f in ('/proc/1/environ', '/proc/1/maps', '/proc/1/fdinfo/0'):
    try:
        b = open(f, 'rb').read()
        print(f, 'readable')
        if f.endswith('environ'):
            env = [v.decode() for v in b.split(b'\0') if v]
            print('agent_env_is_the_jobs', all(os.environ.get(k) == v for k, v in (e.split('=', 1) for e in env)))
    except OSError:
        print(f, 'refused')
status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)
print('seccomp', status.get('Seccomp', '?').strip())
print('no_new_privs', status.get('NoNewPrivs', '?').strip())
`

// TestAgentOutOfReach: on every runtime, a job can reach neither the agent
// (its priority, affinity, rlimits, signals, /proc files) nor new
// namespaces, nor the syscalls only sandq's seccomp profile denies; the
// same expectations on runc and gVisor.
func TestAgentOutOfReach(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	forEachBackend(t, []string{"docker", "gvisor"}, func(t *testing.T, backend string) {
		e := newEnv(t)
		e.startWorkerOn(t, backend, "--concurrency", "1")
		r := e.wait(e.enqueue(jobs.Job{Lang: "python", Code: agentReachProbe, Limits: jobs.Limits{TimeoutMS: 60_000}}), 3*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, "%s %s", r.Reason, r.Stderr)
		t.Logf("%s:\n%s", backend, r.Stdout)
		require.NotContains(t, r.Stdout, "ALLOWED")
		require.Contains(t, r.Stdout, "seccomp 2\n", "sandq's profile is in force")
		require.Equal(t, 15, strings.Count(r.Stdout, " refused\n")-strings.Count(r.Stdout, "/proc/1/environ refused\n")-
			strings.Count(r.Stdout, "/proc/1/maps refused\n")-strings.Count(r.Stdout, "/proc/1/fdinfo/0 refused\n"), r.Stdout)
		for _, f := range []string{"/proc/1/environ", "/proc/1/maps"} {
			require.Contains(t, r.Stdout, f+" refused\n")
		}
		if backend == "gvisor" {
			// gVisor's procfs lets any process of the sandbox read PID 1's
			// fdinfo (runc's checks ptrace access: another uid, refused).
			// Documented in docs/security.md: it shows the agent's
			// descriptors' offsets and flags.
			require.Contains(t, r.Stdout, "/proc/1/fdinfo/0 readable\n")
			return
		}
		require.Contains(t, r.Stdout, "/proc/1/fdinfo/0 refused\n")
	})
}

// TestMessageQueueGone: a POSIX message queue one job makes is not there
// for the next job of the same container: the scrub empties /dev/mqueue
// on runc; gVisor, which has no mqueue filesystem to scrub, refuses the
// calls (sandq's profile without them there, docs/security.md).
func TestMessageQueueGone(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	const mq = `
import ctypes, os, sys
rt = ctypes.CDLL('librt.so.1', use_errno=True)
flags = os.O_RDWR | (os.O_CREAT if sys.argv[-1] == 'make' else 0)
fd = rt.mq_open(b'/sandq-left', flags, 0o600, None)
print('open' if fd >= 0 else os.strerror(ctypes.get_errno()))
`
	forEachBackend(t, []string{"docker", "gvisor"}, func(t *testing.T, backend string) {
		e := newEnv(t)
		e.startWorkerOn(t, backend, "--concurrency", "1", "--max-per-pool", "1")
		first := e.wait(e.enqueue(jobs.Job{Lang: "python", Code: mq, Args: []string{"make"}}), 2*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, first.Status, "%s %s", first.Reason, first.Stderr)
		next := e.wait(e.enqueue(jobs.Job{Lang: "python", Code: mq, Args: []string{"find"}}), 2*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, next.Status, "%s %s", next.Reason, next.Stderr)
		if backend == "gvisor" {
			require.Equal(t, "Operation not permitted\n", first.Stdout, "no message queues on gVisor")
		} else {
			require.Equal(t, "open\n", first.Stdout)
		}
		require.NotEqual(t, "open\n", next.Stdout, "the queue is gone")
	})
}

// TestWorkerStatesProtections: a worker starts one container before any
// job and states what the engine applies; on an engine that cannot grant
// CAP_SYS_RESOURCE it refuses to start unless --allow-unpinned-oom, and
// says why.
func TestWorkerStatesProtections(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	e := newEnv(t)
	if engineGrantsSysResource() {
		w := e.startWorker()
		require.Contains(t, w.logs(), `"seccomp":true,"oom_pinned":true`)
		return
	}
	w := e.startWorker("--allow-unpinned-oom")
	require.Contains(t, w.logs(), `"seccomp":true,"oom_pinned":false`)
	require.Contains(t, w.logs(), "--allow-unpinned-oom: steps' OOM scores are raised but not pinned")
	out, err := exec.Command(bins.worker, append(e.redisFlags(), "--prefix", e.prefix, "--queue-prefix", e.queuePrefix,
		"--owner", e.prefix+"-refused", "--metrics-addr", "", "--publish-versions=false")...).CombinedOutput()
	require.Error(t, err, "a worker without the flag does not start: %s", out)
	require.Contains(t, string(out), "cannot grant CAP_SYS_RESOURCE")
	require.Contains(t, string(out), "--allow-unpinned-oom")
}
