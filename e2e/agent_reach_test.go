package e2e

import (
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
            print('agent_env', sorted(v.split(b'=')[0].decode() for v in b.split(b'\0') if v))
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
		require.Equal(t, 14, strings.Count(r.Stdout, " refused\n")-strings.Count(r.Stdout, "/proc/1/environ refused\n")-
			strings.Count(r.Stdout, "/proc/1/maps refused\n")-strings.Count(r.Stdout, "/proc/1/fdinfo/0 refused\n"), r.Stdout)
		if backend == "gvisor" {
			// gVisor's procfs lets any process of the sandbox read these
			// files of PID 1 (runc's checks ptrace access: another uid,
			// refused). Documented in docs/security.md: what they show is
			// the agent's memory map, its descriptors' flags and its
			// environment, which holds only what every image sets.
			require.Contains(t, r.Stdout, "/proc/1/environ readable\n")
			require.Contains(t, r.Stdout, "agent_env ['HOME', 'HOSTNAME', 'PATH']\n")
			return
		}
		for _, f := range []string{"/proc/1/environ", "/proc/1/maps", "/proc/1/fdinfo/0"} {
			require.Contains(t, r.Stdout, f+" refused\n")
		}
	})
}
