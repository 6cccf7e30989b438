package sandbox_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/sandbox"
)

// deniedSyscalls are the probes of seccompProbe that sandq's seccomp
// profile must refuse; a refusal is EPERM or ENOSYS. Each is called so that
// it would succeed, or fail with another errno (EBADF, ENOKEY), were it
// allowed, except where the kernel itself refuses an unprivileged caller
// (unshare without CLONE_NEWUSER): the filter must refuse it all the same.
var deniedSyscalls = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"userfaultfd", "perf_event_open", "bpf",
	"unshare(NEWUSER)", "unshare(NEWUSER|NEWNS|NEWPID|NEWNET|NEWUTS)",
	"unshare(NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC|NEWCGROUP)",
	"setns", "clone(NEWUSER)", "clone3(NEWUSER)",
}

// allowedCalls are what programs in every language need and must keep.
var allowedCalls = []string{
	"fork", "thread", "subprocess", "multiprocessing", "epoll", "socketpair",
	"eventfd", "memfd", "mmap",
}

// seccompProbe calls, as the job uid, each syscall of deniedSyscalls in a
// child process of its own (one that the kernel allowed, unshare or clone,
// would change or copy the process), then the ordinary calls of
// allowedCalls, and prints one JSON object: the errno's name, "succeeded",
// or "ok".
const seccompProbe = `
import ctypes, errno, json, mmap, multiprocessing, os, select, socket, subprocess, threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long

# x86_64 syscall numbers
NR = dict(io_uring_setup=425, io_uring_enter=426, io_uring_register=427, keyctl=250, add_key=248,
          request_key=249, userfaultfd=323, perf_event_open=298, bpf=321, unshare=272, setns=308,
          clone=56, clone3=435)
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
SIGCHLD = 17

def addr(buf):
    return ctypes.addressof(buf)

def call(name, *args):
    ctypes.set_errno(0)
    n = libc.syscall(L(NR[name]), *[L(a) for a in args])
    if n == -1:
        e = ctypes.get_errno()
        return errno.errorcode.get(e, str(e))
    return 'succeeded'

def fork_like(name, *args):
    # clone and clone3 with a namespace flag, no new stack: were the call
    # allowed, the new process would come back here and leave at once.
    ctypes.set_errno(0)
    n = libc.syscall(L(NR[name]), *[L(a) for a in args])
    if n == 0:
        os._exit(0)
    if n == -1:
        e = ctypes.get_errno()
        return errno.errorcode.get(e, str(e))
    os.waitpid(n, 0)
    return 'succeeded'

def in_child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = fn()
        except BaseException as e:
            res = 'exception %r' % e
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    out = b''
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode() or 'no result'

uring_params = ctypes.create_string_buffer(120)           # struct io_uring_params
perf_attr = (ctypes.c_uint32 * 32)()                      # struct perf_event_attr, 128 bytes
perf_attr[0], perf_attr[1], perf_attr[2] = 1, 128, 1      # PERF_TYPE_SOFTWARE, size, SW_TASK_CLOCK
perf_attr[10] = 1 | 32 | 64                               # disabled, exclude_kernel, exclude_hv
bpf_attr = (ctypes.c_uint32 * 4)(0xffffffff, 0, 0, 0)     # BPF_OBJ_GET_INFO_BY_FD of fd -1: EBADF if allowed
clone_args = (ctypes.c_uint64 * 11)()                     # struct clone_args, 88 bytes
clone_args[0], clone_args[4] = CLONE_NEWUSER, SIGCHLD
user, desc, none, x = (ctypes.c_char_p(s) for s in (b'user', b'sandq-probe', b'sandq-probe-none', b'x'))
vp = lambda p: ctypes.cast(p, ctypes.c_void_p).value

probes = {
    'io_uring_setup': lambda: call('io_uring_setup', 1, addr(uring_params)),
    'io_uring_enter': lambda: call('io_uring_enter', -1, 0, 0, 0, 0, 0),
    'io_uring_register': lambda: call('io_uring_register', -1, 0, 0, 0),
    'keyctl': lambda: call('keyctl', 0, -4, 0),             # KEYCTL_GET_KEYRING_ID of the user keyring
    'add_key': lambda: call('add_key', vp(user), vp(desc), vp(x), 1, -2),  # into the process keyring
    'request_key': lambda: call('request_key', vp(user), vp(none), 0, 0),     # ENOKEY if allowed
    'userfaultfd': lambda: call('userfaultfd', os.O_CLOEXEC | 1),             # UFFD_USER_MODE_ONLY
    'perf_event_open': lambda: call('perf_event_open', addr(perf_attr), 0, -1, -1, 0),
    'bpf': lambda: call('bpf', 15, addr(bpf_attr), 16),
    'unshare(NEWUSER)': lambda: call('unshare', CLONE_NEWUSER),
    'unshare(NEWUSER|NEWNS|NEWPID|NEWNET|NEWUTS)':
        lambda: call('unshare', CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS),
    'unshare(NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC|NEWCGROUP)':
        lambda: call('unshare', CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP),
    'setns': lambda: call('setns', -1, 0),                  # EBADF if allowed
    'clone(NEWUSER)': lambda: fork_like('clone', CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
    'clone3(NEWUSER)': lambda: fork_like('clone3', addr(clone_args), 88),
}
res = {name: in_child(fn) for name, fn in probes.items()}

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
def thread():
    out = []
    t = threading.Thread(target=lambda: out.append(sum(range(1000))))
    t.start()
    t.join()
    return out == [499500]
def subproc():
    return subprocess.run(['/bin/sh', '-c', 'echo hi'], capture_output=True).stdout == b'hi\n'
def mp():
    with multiprocessing.get_context('fork').Pool(2) as p:
        return p.map(abs, [-1, -2, -3]) == [1, 2, 3]
def epoll():
    ep, (r, w) = select.epoll(), os.pipe()
    ep.register(r, select.EPOLLIN)
    os.write(w, b'x')
    return ep.poll(1) == [(r, select.EPOLLIN)]
def socketpair():
    a, b = socket.socketpair()
    a.sendall(b'ping')
    return b.recv(4) == b'ping'
def eventfd():
    fd = os.eventfd(0)
    os.eventfd_write(fd, 3)
    return os.eventfd_read(fd) == 3
def memfd():
    fd = os.memfd_create('probe')
    os.write(fd, b'abc')
    return os.pread(fd, 3, 0) == b'abc'
def anon_mmap():
    m = mmap.mmap(-1, 1 << 16)
    m[:3] = b'abc'
    return m[:3] == b'abc'
for name, fn in [('fork', fork), ('thread', thread), ('subprocess', subproc), ('multiprocessing', mp),
                 ('epoll', epoll), ('socketpair', socketpair), ('eventfd', eventfd), ('memfd', memfd),
                 ('mmap', anon_mmap)]:
    try:
        res[name] = 'ok' if fn() else 'wrong result'
    except Exception as e:
        res[name] = 'exception %r' % e
print(json.dumps(res, sort_keys=True))
`

// TestSeccomp runs seccompProbe in a sandbox, as the job uid: every syscall
// the profile removes fails with EPERM or ENOSYS, on every backend, and the
// ordinary ones still work. Without sandq's profile it fails on both: Docker
// 20.10's default allows io_uring, containers-common's allows keyctl,
// unshare, setns and clone with namespace flags.
func TestSeccomp(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		st := tb.run(t, seccompProbe)
		var got map[string]string
		require.NoError(t, json.Unmarshal(st.Stdout.Bytes(), &got), "stdout %s stderr %s", stdout(st), stderr(st))
		t.Logf("%s: %v", backend, got)
		want := map[string]string{}
		for _, name := range deniedSyscalls {
			want[name] = "EPERM or ENOSYS"
			if v := got[name]; v == "EPERM" || v == "ENOSYS" || backend == "gvisor" {
				// gVisor serves these in its own kernel (the sentry); the
				// host's kernel, behind gVisor's own filter, never sees
				// them, so what the sentry answers is not the profile's.
				got[name] = "EPERM or ENOSYS"
			}
		}
		for _, name := range allowedCalls {
			want[name] = "ok"
		}
		require.Empty(t, cmp.Diff(want, got), "syscalls in the sandbox (-want +got)")
	})
}

// TestSeccompProfile checks the shipped profile for the edits seccomp.go
// lists, so that a profile updated from a newer moby keeps them.
func TestSeccompProfile(t *testing.T) {
	type cond struct {
		Caps   []string `json:"caps"`
		Arches []string `json:"arches"`
	}
	type arch struct {
		Arch string `json:"architecture"`
	}
	var p struct {
		DefaultAction   string `json:"defaultAction"`
		DefaultErrnoRet *uint  `json:"defaultErrnoRet"`
		ArchMap         []arch `json:"archMap"`
		Syscalls        []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *uint    `json:"errnoRet"`
			Args     []struct {
				Index uint   `json:"index"`
				Value uint64 `json:"value"`
				Op    string `json:"op"`
			} `json:"args"`
			Includes cond `json:"includes"`
			Excludes cond `json:"excludes"`
		} `json:"syscalls"`
	}
	require.NoError(t, json.Unmarshal(sandbox.SeccompProfile(), &p))
	require.Equal(t, "SCMP_ACT_ERRNO", p.DefaultAction)
	require.NotNil(t, p.DefaultErrnoRet)
	require.Equal(t, uint(1), *p.DefaultErrnoRet, "EPERM")
	require.Contains(t, p.ArchMap, arch{"SCMP_ARCH_X86_64"})

	never := []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key",
		"request_key", "userfaultfd", "perf_event_open", "bpf", "unshare", "setns"}
	const nsFlags = 0x7E020000 // CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
	var cloneRules, clone3Rules int
	for i, r := range p.Syscalls {
		require.NotEmpty(t, r.Names, "rule %d", i)
		if r.Action == "SCMP_ACT_ALLOW" {
			for _, name := range r.Names {
				require.NotContains(t, never, name, "rule %d allows %s", i, name)
			}
		}
		for _, name := range r.Names {
			switch name {
			case "clone":
				cloneRules++
				// Allowed only when no namespace flag is set, whatever
				// the capabilities.
				require.Equal(t, "SCMP_ACT_ALLOW", r.Action, "rule %d", i)
				require.Len(t, r.Args, 1, "rule %d", i)
				require.Equal(t, "SCMP_CMP_MASKED_EQ", r.Args[0].Op, "rule %d", i)
				require.Equal(t, uint64(nsFlags), r.Args[0].Value, "rule %d: the mask", i)
				require.Empty(t, r.Includes.Caps, "rule %d", i)
				require.Empty(t, r.Excludes.Caps, "rule %d", i)
			case "clone3":
				clone3Rules++
				require.Equal(t, "SCMP_ACT_ERRNO", r.Action, "rule %d", i)
				require.NotNil(t, r.ErrnoRet, "rule %d", i)
				require.Equal(t, uint(38), *r.ErrnoRet, "rule %d: ENOSYS, for glibc to fall back to clone", i)
				require.Empty(t, r.Includes, "rule %d", i)
				require.Empty(t, r.Excludes, "rule %d", i)
			}
		}
	}
	require.Equal(t, 2, cloneRules, "clone: the rule for x86 and the others, the one for s390")
	require.Equal(t, 1, clone3Rules)
}

// TestSeccompProfileSparesPID1: the calls that change another process's
// priority or CPU placement are allowed only when their target is not 1,
// the agent: gVisor's kernel grants them to any process of the sandbox
// (runc's checks the caller's uid), so the profile denies them there too.
func TestSeccompProfileSparesPID1(t *testing.T) {
	var p struct {
		Syscalls []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
			Args   []struct {
				Index uint   `json:"index"`
				Value uint64 `json:"value"`
				Op    string `json:"op"`
			} `json:"args"`
		} `json:"syscalls"`
	}
	require.NoError(t, json.Unmarshal(sandbox.SeccompProfile(), &p))
	target := map[string]uint{"setpriority": 1, "sched_setaffinity": 0, "sched_setattr": 0, "sched_setparam": 0, "sched_setscheduler": 0}
	seen := map[string]int{}
	for i, r := range p.Syscalls {
		for _, name := range r.Names {
			idx, ok := target[name]
			if !ok || r.Action != "SCMP_ACT_ALLOW" {
				continue
			}
			seen[name]++
			require.Len(t, r.Args, 1, "rule %d allows %s unconditionally", i, name)
			require.Equal(t, idx, r.Args[0].Index, "rule %d: %s's target argument", i, name)
			require.Equal(t, "SCMP_CMP_NE", r.Args[0].Op, "rule %d", i)
			require.Equal(t, uint64(1), r.Args[0].Value, "rule %d", i)
		}
	}
	for name := range target {
		require.Equal(t, 1, seen[name], "%s: one rule, conditional", name)
	}
}
