package sandbox_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/sandbox"
)

// prestartProbe prints everything a Python program can see of how it was
// started that is not different in every process anyway (pids, times, hash
// seeds): argv, __main__'s globals, sys.path and the import state, cwd,
// env, standard streams, credentials, session, limits, signal state,
// capabilities, open fds, the work dir. It captures sys.modules first,
// before importing anything itself.
const prestartProbe = `import sys
mods = sorted(sys.modules)
main_globals = sorted(globals())
import json, os, stat, signal, linecache, threading, ctypes, platform
def robust_list():  # glibc registers one per thread; the kernel does not carry it into a child
    head, size = ctypes.c_void_p(), ctypes.c_size_t()
    nr = {'x86_64': 274, 'aarch64': 100}[platform.machine()]
    if ctypes.CDLL(None, use_errno=True).syscall(nr, 0, ctypes.byref(head), ctypes.byref(size)) != 0:
        return 'errno %d' % ctypes.get_errno()
    return [head.value is not None, size.value]
def glibc_tid():  # how often glibc's own record of the thread (struct pthread) holds its TID
    words = memoryview(ctypes.string_at(threading.get_ident(), 1536)).cast('i')
    return sum(w == threading.get_native_id() for w in words)
def read(p):  # gVisor has no /proc/self/limits
    try:
        return open(p).read()
    except OSError as e:
        return type(e).__name__
def fmt(fd):
    st = os.fstat(fd)
    return [stat.S_IFMT(st.st_mode), os.isatty(fd), os.get_blocking(fd)]
status = {}
for line in read('/proc/self/status').splitlines():
    k, _, v = line.partition(':')
    if k in ('Name', 'Umask', 'State', 'Uid', 'Gid', 'Groups', 'SigQ', 'SigPnd', 'ShdPnd', 'SigBlk', 'SigIgn', 'SigCgt',
             'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'Cpus_allowed_list'):
        status[k] = v.strip()
facts = {
    'argv': sys.argv, 'orig_argv': sys.orig_argv, 'executable': sys.executable,
    'cmdline': read('/proc/self/cmdline'), 'exe': os.readlink('/proc/self/exe'),
    'file': __file__, 'name': __name__, 'spec': repr(__spec__), 'doc': __doc__,
    'loader': type(__loader__).__name__, 'loader_name': getattr(__loader__, 'name', None),
    'loader_path': getattr(__loader__, 'path', None), 'cached': globals().get('__cached__', 'absent'),
    'builtins': type(__builtins__).__name__, 'globals': main_globals, 'modules': mods,
    'path': sys.path, 'importer_cache': sorted((k, type(v).__name__) for k, v in sys.path_importer_cache.items()),
    'meta_path': [repr(type(m)) for m in sys.meta_path], 'path_hooks': [getattr(h, '__qualname__', type(h).__name__) for h in sys.path_hooks],
    'flags': repr(sys.flags), 'warnoptions': sys.warnoptions, 'xoptions': sys._xoptions,
    'prefix': [sys.prefix, sys.base_prefix, sys.exec_prefix],
    'cwd': os.getcwd(), 'env': dict(os.environ),
    'streams': [fmt(0), fmt(1), fmt(2)], 'stdin': sys.stdin.read(),
    'encodings': [sys.stdin.encoding, sys.stdout.encoding, sys.stderr.encoding, sys.getfilesystemencoding(),
                  sys.stdout.errors, sys.stdout.line_buffering, sys.stderr.line_buffering],
    'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
    'session_leader': os.getsid(0) == os.getpid(), 'group_leader': os.getpgid(0) == os.getpid(), 'ppid': os.getppid(),
    'status': status, 'limits': read('/proc/self/limits'),
    'nice': os.getpriority(os.PRIO_PROCESS, 0), 'sched': os.sched_getscheduler(0),
    'oom_score_adj': read('/proc/self/oom_score_adj'), 'cgroup': read('/proc/self/cgroup'),
    'fds': sorted(os.listdir('/proc/self/fd')),
    'signals': {int(s): str(signal.getsignal(s)) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)},
    'work': sorted((n, stat.S_IFMT(os.lstat(n).st_mode), os.lstat(n).st_mode & 0o7777, os.lstat(n).st_uid, os.lstat(n).st_size)
                   for n in os.listdir('.')),
    'source_line': linecache.getline(__file__, 1),
    'tid': [threading.get_native_id() == os.getpid(), signal.pthread_kill(threading.get_ident(), 0), glibc_tid()],
    'robust_list': robust_list(),
}
print(json.dumps(facts, sort_keys=True, indent=1))
`

// The ways a script ends, each compared between a cold start and a
// prestart: an uncaught exception (traceback with the script's source
// lines), sys.exit with a message, a syntax error, exit statuses, output
// on both streams without a newline, a killed interpreter, an import of a
// module beside the script.
var prestartEndings = map[string]string{
	"probe":     prestartProbe + "raise ValueError('probe')\n",
	"exit":      "import sys\nprint('out', end='')\nprint('err', end='', file=sys.stderr)\nsys.exit('bye')\n",
	"status":    "import os\nos._exit(7)\n",
	"syntax":    "print('never'\n",
	"signal":    "import os, signal\nprint('before', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n",
	"interrupt": "raise KeyboardInterrupt\n",
	"recursion": "def f(): return f()\nf()\n",
	"unicode":   "# π\nprint('é', __file__, __name__)\n",
	"abort":     "import os\nprint('before', flush=True)\nos.abort()\n",
	"raise":     "import signal\nsignal.raise_signal(signal.SIGUSR1)\n",
	"thread":    "import threading\nt = threading.Thread(target=print, args=('in a thread',))\nt.start()\nt.join()\nprint('joined')\n",
}

// TestPrestartIsACold start runs each ending three times in one container:
// cold without asking for a prestart, cold asking for one, and then in the
// interpreter started for it. The three results must be identical, to the
// byte: exit status, signal, stdout, stderr.
func TestPrestartIsAColdStart(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		for name, code := range prestartEndings {
			cold := requireSameAsCold(t, name, func(mods ...func(*agent.Step)) agent.StepResult { return tb.run(t, code, mods...) })
			if name == "probe" {
				require.Contains(t, stdout(cold), `"argv": [`+"\n  \"main.py\"\n ]", "the probe ran: %s", stderr(cold))
				require.Contains(t, stderr(cold), "ValueError: probe")
				require.Contains(t, stdout(cold), `"tid": [`+"\n  true,\n  null,\n  1\n ]", "glibc knows the probe's thread")
				require.Contains(t, stdout(cold), `"robust_list": [`+"\n  true,", "the probe has a robust list")
			}
			if sig := map[string]int{"abort": 6, "raise": 10}[name]; sig != 0 {
				require.Equal(t, sig, cold.Signal, name)
			}
		}
		// With stdin (a judge's case, an LLM program reading its input):
		// the fork gets the run's pipe, as a cold start does.
		for _, in := range []string{"3\n1 2 3\n", strings.Repeat("x", 256<<10) + "\n"} {
			withStdin := func(s *agent.Step) { s.Stdin = []byte(in) }
			cold := requireSameAsCold(t, "probe with stdin", func(mods ...func(*agent.Step)) agent.StepResult {
				return tb.run(t, prestartProbe, append(mods, withStdin)...)
			})
			require.Contains(t, stdout(cold), `"stdin": "`+strings.ReplaceAll(in[:min(len(in), 20)], "\n", `\n`), "the probe read its stdin")
		}
	})
}

// requireSameAsCold runs a program three times in one container: cold
// without asking for a prestart, cold asking for one, and then in the
// interpreter started for it. The three results must be identical, to the
// byte: exit status, signal, stdout, stderr. It returns the cold one.
func requireSameAsCold(t *testing.T, name string, run func(...func(*agent.Step)) agent.StepResult) agent.StepResult {
	t.Helper()
	prestart := func(s *agent.Step) { s.Prestart = true }
	cold := run()
	asked := run(prestart)
	require.False(t, cold.Prestarted, name)
	require.False(t, asked.Prestarted, "%s: the run before it asked for none", name)
	warm := warmRun(t, name, func() agent.StepResult { return run(prestart) },
		func(r agent.StepResult) bool { return r.Prestarted })
	for _, r := range []agent.StepResult{asked, warm} {
		require.Equal(t, cold.ExitCode, r.ExitCode, name)
		require.Equal(t, cold.Signal, r.Signal, name)
		require.Equal(t, stdout(cold), stdout(r), name)
		require.Equal(t, stderr(cold), stderr(r), name)
		require.True(t, r.Started && !r.TimedOut && !r.OOMKilled, name)
	}
	return cold
}

// warmRun runs a program whose previous run asked for a prestart, and
// returns its result once it ran in the process started ahead for it. A
// run may start cold instead when that process was not ready in time (a
// fork server gets a second, a FIFO start fifoBootWait) or the pool
// replaced the container (a scrub that failed or timed out): the agent
// falls back to a cold start, as it must. On a machine loaded past that
// (the whole gVisor suite beside CPU hogs on 2 cores) the test runs again,
// up to three times in all, and fails if the prestart never served.
func warmRun[R any](t *testing.T, name string, run func() R, prestarted func(R) bool) R {
	t.Helper()
	for i := 1; ; i++ {
		r := run()
		if prestarted(r) {
			return r
		}
		require.Less(t, i, 3, "%s: the previous run asked for a prestart, and %d runs in a row started cold", name, i)
		t.Logf("%s: run %d started cold after a run that asked for a prestart (not ready in time, or a new container); again", name, i)
	}
}

// warm runs code (its mods ask for a prestart) until it runs prestarted,
// as warmRun, and returns that run.
func (tb *testBundle) warm(t *testing.T, name, code string, mods ...func(*agent.Step)) agent.StepResult {
	t.Helper()
	return warmRun(t, name, func() agent.StepResult { return tb.run(t, code, mods...) },
		func(r agent.StepResult) bool { return r.Prestarted })
}

// TestPrestartFallsBackCold: a run that differs from the prestarted step in
// anything the interpreter reads at start-up (env, argv, stdin, rlimits)
// or whose script a FIFO cannot stand in for starts cold, and right; the
// waiting interpreter is killed first and never runs its code.
func TestPrestartFallsBackCold(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		prestart := func(s *agent.Step) { s.Prestart = true }
		show := "import os, sys\nprint(sys.argv, os.environ.get('X'), sys.stdin.read(), len(os.listdir('/proc')))\n"
		require.Equal(t, "['main.py'] None  ", stdout(tb.run(t, show, prestart))[:len("['main.py'] None  ")])

		cases := []struct {
			name string
			mod  func(*agent.Step)
			want string
		}{
			{"env", func(s *agent.Step) { s.Env = append(s.Env, "X=1") }, "['main.py'] 1  "},
			{"argv", func(s *agent.Step) { s.Argv = append(s.Argv, "a") }, "['main.py', 'a'] None  "},
			{"rlimits", func(s *agent.Step) { s.Rlimits.CPU = 30 }, "['main.py'] None  "},
			{"not asked", func(s *agent.Step) { s.Prestart = false }, "['main.py'] None  "},
		}
		for _, c := range cases {
			// Two matching runs: the second runs in the interpreter the
			// first left (the previous case's run asked for a prestart
			// of its own step).
			tb.run(t, show, prestart)
			tb.warm(t, c.name, show, prestart)
			r := tb.run(t, show, prestart, c.mod)
			require.False(t, r.Prestarted, c.name)
			require.Equal(t, 0, r.ExitCode, "%s: %s", c.name, stderr(r))
			require.Contains(t, stdout(r), c.want, c.name)
		}
		// A zip application: CPython decides at start-up whether its script
		// is one, and the fork server decided on an empty file. It starts
		// cold, and runs the archive's __main__.py as a cold start does.
		var zb bytes.Buffer
		zw := zip.NewWriter(&zb)
		w, err := zw.Create("__main__.py")
		require.NoError(t, err)
		_, err = w.Write([]byte("print('from the zip', __name__)\n"))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		// The forked process reads its script from the file, as a cold start
		// does: a NUL byte and another encoding run warm, and right.
		for _, c := range []struct {
			code string
			warm bool
		}{{zb.String(), false}, {"print(1)\x00\n", true}, {"# coding: latin-1\nprint('\xe9')\n", true}} {
			tb.run(t, show, prestart)
			tb.warm(t, "zip", show, prestart)
			warm := tb.run(t, c.code, prestart)
			cold := tb.run(t, c.code)
			require.Equal(t, c.warm, warm.Prestarted, "%q", c.code)
			require.Equal(t, stdout(cold)+stderr(cold), stdout(warm)+stderr(warm))
			require.Equal(t, cold.ExitCode, warm.ExitCode)
		}
		require.Equal(t, "from the zip __main__\n", stdout(tb.run(t, zb.String(), prestart)))
	})
}

// forkServerAttacks are jobs that go after the fork server their own process
// was forked from (it runs as the same uid): each tries to change something
// the next job's process would inherit, or to reach into it. Each prints
// what it managed, for the test to check that the attack was real.
var forkServerAttacks = map[string]string{
	"ptrace": `import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, z, 0, 0)  # PTRACE_ATTACH
print('ptrace', 'denied' if r != 0 else 'attached')
try:
    open('/proc/%d/mem' % z, 'r+b').write(b'x')
    print('mem written')
except OSError:
    print('mem denied')
try:
    open('/proc/%d/comm' % z, 'w').write('owned')
    print('comm written')
except OSError:
    print('comm denied')
`,
	"prlimit": `import resource
resource.prlimit(z, resource.RLIMIT_NOFILE, (16, 16))
print('nofile', resource.prlimit(z, resource.RLIMIT_NOFILE))
`,
	"nice": "os.setpriority(os.PRIO_PROCESS, z, 15)\nprint('nice', os.getpriority(os.PRIO_PROCESS, z))\n",
	"sched": `try:
    os.sched_setscheduler(z, os.SCHED_BATCH, os.sched_param(0))
    print('sched', os.sched_getscheduler(z))
except OSError:  # a kernel with SCHED_OTHER alone (gVisor before 2023)
    print('sched unsupported')
`,
	"signals": `import signal
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGCHLD):
    os.kill(z, s)
try:
    for i in range(200):  # real-time signals queue, each taking from the uid's quota
        os.kill(z, signal.SIGRTMIN + 1)
except BlockingIOError:  # gVisor queues fewer
    pass
print('signals sent')
`,
	"stop":  "import signal\nos.kill(z, signal.SIGSTOP)\nprint('stopped')\n",
	"kill":  "import signal\nos.kill(z, signal.SIGKILL)\nprint('killed')\n",
	"child": "import subprocess\nsubprocess.Popen(['sleep', '60'], start_new_session=True)\nprint('left a child')\n",
}

// forkServerFind finds the fork server from a job's process: the other
// `python3 main.py` process.
const forkServerFind = `import os
def find():
    for d in os.listdir('/proc'):
        if d.isdigit() and int(d) not in (1, os.getpid()):
            try:
                if open('/proc/%s/cmdline' % d, 'rb').read().split(b'\0')[:2] == [b'python3', b'main.py']:
                    return int(d)
            except OSError:
                pass
    raise SystemExit('no fork server')
z = find()
`

// TestPrestartForkServerHoldsAgainstJobs: whatever a job forked from the
// fork server does to it, the next job's process is what a cold start would
// be (the probe's output is byte for byte a cold run's), and ends right.
// The server refuses to fork once changed, dies with a job's leftovers, and
// cannot be traced or written into.
func TestPrestartForkServerHoldsAgainstJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		prestart := func(s *agent.Step) { s.Prestart = true }
		for name, attack := range forkServerAttacks {
			tb.run(t, "print(1)\n", prestart)
			tb.warm(t, name, "print(1)\n", prestart)
			a := tb.run(t, forkServerFind+attack, prestart)
			require.True(t, a.Prestarted, name)
			require.Equal(t, 0, a.ExitCode, "%s: %s", name, stderr(a))
			switch name {
			case "ptrace":
				// gVisor lets the uid rename a process it cannot trace:
				// the server then refuses to fork (its name is part of
				// its state), and the next job starts cold.
				want := map[bool]string{false: "comm denied\n", true: "comm written\n"}[backend == "gvisor"]
				require.Equal(t, "ptrace denied\nmem denied\n"+want, stdout(a))
			case "prlimit":
				require.Equal(t, "nofile (16, 16)\n", stdout(a), "the attack reached the server")
			case "nice":
				require.Equal(t, "nice 15\n", stdout(a), "the attack reached the server")
			case "sched":
				require.Equal(t, "sched 3\n", stdout(a), "the attack reached the server")
			}
			next := tb.run(t, prestartProbe, prestart)
			cold := tb.run(t, prestartProbe) // in the same container: the probe shows its uid
			require.Contains(t, stdout(cold), `"nice": 0`, stderr(cold))
			require.Equal(t, stdout(cold), stdout(next), "%s: the next job (prestarted %v)", name, next.Prestarted)
			require.Equal(t, stderr(cold), stderr(next), name)
			require.Equal(t, 0, next.ExitCode, name)
			// And jobs run in a fork server again.
			tb.run(t, "print(1)\n", prestart)
			tb.warm(t, name, "print(1)\n", prestart)
		}
	})
}

// TestPrestartLetGoWhenIdle: a container left waiting longer than the
// pool's PrestartHold lets its fork server go, and the process it forked
// for the next job (before that, through agent.IdleTrim, both wait). The
// next job starts cold, and right, and leaves a new server behind.
func TestPrestartLetGoWhenIdle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		const hold = 6 * time.Second // agent.IdleTrim and the checks after it fit well inside
		tb := setup(t, backend, setupOpts{prestartHold: hold})
		prestart := func(s *agent.Step) { s.Prestart = true }
		tb.run(t, "print(1)\n", prestart)
		tb.warm(t, "let go", "print(1)\n", prestart)
		// The agent's children, seen from the host: gVisor's are inside its
		// own kernel, and only the runs tell.
		children := func() []string { return nil }
		if backend != "gvisor" {
			left, err := tb.rt.List(context.Background(), map[string]string{sandbox.LabelOwner: tb.pool.Owner()})
			require.NoError(t, err)
			require.Len(t, left, 1)
			out, err := exec.Command(backend, "inspect", "-f", "{{.State.Pid}}", left[0].ID).Output() // docker or podman
			require.NoError(t, err)
			agentPID := strings.TrimSpace(string(out))
			children = func() []string { return childrenOf(t, agentPID) }
			require.Eventually(t, func() bool { return len(children()) == 2 }, 5*time.Second, 50*time.Millisecond,
				"the fork server and the process it forked for the next job: %q", children())
		}
		time.Sleep(agent.IdleTrim + time.Second)
		if backend != "gvisor" {
			require.Equal(t, []string{"python3 main.py", "python3 main.py"}, children(), "both wait through agent.IdleTrim")
		}
		r := tb.run(t, "print(2)\n", prestart)
		ran := time.Now()
		require.True(t, r.Prestarted, "within the hold, a job runs in the fork server")
		require.Equal(t, "2\n", stdout(r))
		if backend != "gvisor" {
			require.Eventually(t, func() bool { return len(children()) == 2 }, 2*time.Second, 50*time.Millisecond,
				"after the job, the server and a new forked process: %q", children())
			require.Eventually(t, func() bool { return len(children()) == 0 }, hold+5*time.Second, 100*time.Millisecond,
				"after the hold, no process but the agent: %q", children())
			require.Greater(t, time.Since(ran), hold-time.Second, "let go at the hold, not before")
		} else {
			time.Sleep(hold + 2*time.Second)
		}
		r = tb.run(t, "import sys\nprint(3, sys.argv)\n", prestart)
		require.False(t, r.Prestarted, "past the hold, the next job starts cold")
		require.Equal(t, "3 ['main.py']\n", stdout(r), stderr(r))
		r = tb.warm(t, "the cold job left a fork server for the next", "print(4)\n", prestart)
		require.Equal(t, "4\n", stdout(r))
	})
}

// childrenOf lists the command lines of a host process's children.
func childrenOf(t *testing.T, pid string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != pid {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		out = append(out, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	return out
}

// judgeCases runs code as a judged job's cases do: one request writes the
// files, then each input is a test case (agent.Step.FreshCase), a request
// of its own, in the same container. prestart asks for the cases' fork
// server.
func (tb *testBundle) judgeCases(t *testing.T, code string, prestart bool, inputs ...string) []agent.StepResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out []agent.StepResult
	err := tb.pool.RunSeq(ctx, tb.spec, func(run sandbox.RunFunc) error {
		files := tb.py(code)
		files.Steps = nil
		res, err := run(ctx, files)
		if err != nil {
			return err
		}
		require.Empty(t, res.FilesError)
		for _, in := range inputs {
			req := tb.py(code, func(s *agent.Step) { s.FreshCase, s.Prestart, s.Stdin = true, prestart, []byte(in) })
			req.Files = nil
			res, err := run(ctx, req)
			if err != nil {
				return err
			}
			require.Len(t, res.Steps, 1, "files error: %s", res.FilesError)
			out = append(out, res.Steps[0])
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestPrestartJudgeCases: a judged job's Python cases run in processes
// forked from a server the agent starts on the job's own script, once the
// work dir is frozen, and each prints, to the byte, what the same case
// prints started cold (every ending, the probe with its stdin). A case
// that goes after the server (every attack of forkServerAttacks) cannot
// reach the next case: it prints what a cold start prints.
func TestPrestartJudgeCases(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setup(t, backend, setupOpts{})
		same := func(name string, cold, warm agent.StepResult) {
			t.Helper()
			require.Equal(t, cold.ExitCode, warm.ExitCode, name)
			require.Equal(t, cold.Signal, warm.Signal, name)
			require.Equal(t, stdout(cold), stdout(warm), name)
			require.Equal(t, stderr(cold), stderr(warm), name)
		}
		inputs := []string{"3\n1 2 3\n", "", strings.Repeat("x", 256<<10) + "\n"}
		for name, code := range prestartEndings {
			cold := tb.judgeCases(t, code, false, inputs...)
			warm := tb.judgeCases(t, code, true, inputs...)
			for i := range inputs {
				require.False(t, cold[i].Prestarted, name)
				require.True(t, warm[i].Prestarted, "%s: case %d forked from the cases' server", name, i)
				same(fmt.Sprintf("%s, case %d", name, i), cold[i], warm[i])
			}
			if name == "probe" {
				require.Contains(t, stdout(cold[0]), `"stdin": "3\n1 2 3\n"`, stderr(cold[0]))
				require.Contains(t, stdout(cold[0]), `"main.py",`+"\n   32768,\n   292,\n   0,", "the probe sees the frozen work dir: %s", stdout(cold[0]))
			}
		}
		for name, attack := range forkServerAttacks {
			code := fmt.Sprintf("import sys\nif sys.stdin.readline() == 'attack\\n':\n    exec(%q)\nelse:\n    exec(%q)\n",
				forkServerFind+attack, prestartProbe)
			cold := tb.judgeCases(t, code, false, "probe\n", "probe\n")
			warm := tb.judgeCases(t, code, true, "probe\n", "attack\n", "probe\n", "probe\n")
			require.True(t, warm[1].Prestarted, name)
			require.Equal(t, 0, warm[1].ExitCode, "%s: %s", name, stderr(warm[1]))
			require.NotEmpty(t, stdout(warm[1]), "%s: the attack ran", name)
			same(name+", before the attack", cold[0], warm[0])
			same(name+", the case after the attack", cold[1], warm[2])
			same(name+", the next one", cold[1], warm[3])
			require.True(t, warm[3].Prestarted, "%s: cases are forked again after a new server", name)
		}
	})
}
