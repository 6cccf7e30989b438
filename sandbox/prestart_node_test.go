package sandbox_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
)

// nodeProbe prints everything a Node.js program can see of how it was
// started that is not different in every process anyway (pids, times):
// argv, the module, require's state, cwd, env, standard streams,
// credentials, parent, limits, signal state, capabilities, open fds, the
// work dir, its own file as read back.
const nodeProbe = `const fs = require('fs'), tty = require('tty'), os = require('os');
const loaded = Object.keys(require.cache);
const read = p => { try { return fs.readFileSync(p, 'utf8'); } catch (e) { return e.code; } };
const fmt = fd => { const st = fs.fstatSync(fd); return [st.mode & fs.constants.S_IFMT, tty.isatty(fd)]; };
const status = {};
for (const line of read('/proc/self/status').split('\n')) {
  const [k, v] = line.split(':');
  if (['Umask', 'Uid', 'Gid', 'Groups', 'SigQ', 'SigPnd', 'ShdPnd', 'SigBlk', 'SigIgn', 'SigCgt', 'CapInh', 'CapPrm',
       'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'Cpus_allowed_list'].includes(k)) status[k] = v.trim();
}
console.log(JSON.stringify({
  argv: process.argv, execArgv: process.execArgv, argv0: process.argv0, execPath: process.execPath,
  cmdline: read('/proc/self/cmdline'), exe: fs.readlinkSync('/proc/self/exe'),
  filename: __filename, dirname: __dirname, main: require.main === module, id: module.id, paths: module.paths,
  loaded, cwd: process.cwd(), env: process.env, streams: [fmt(0), fmt(1), fmt(2)], stdin: fs.readFileSync(0, 'utf8'),
  ids: [process.getuid(), process.geteuid(), process.getgid(), process.getegid(), process.getgroups()],
  ppid: process.ppid, sid: read('/proc/self/stat').split(') ')[1].split(' ').slice(2, 4).map(Number).map(n => n === process.pid),
  status, limits: read('/proc/self/limits'), nice: os.getPriority(), oom: read('/proc/self/oom_score_adj'),
  cgroup: read('/proc/self/cgroup'), fds: fs.readdirSync('/proc/self/fd').sort(),
  work: fs.readdirSync('.').sort().map(n => { const st = fs.lstatSync(n); return [n, st.mode, st.uid, st.size]; }),
  self: read(__filename).split('\n')[0],
}, null, 1));
`

// nodeEndings are the ways a Node.js script ends, each compared between a
// cold start and a FIFO start: an uncaught exception (the stack and the
// source line), an exit status with output on both streams and no
// newline, a syntax error, a signal, an unhandled rejection, a timer after
// the script's end, a byte-order mark, a module beside the script.
var nodeEndings = map[string]string{
	"probe":  nodeProbe + "throw new Error('probe');\n",
	"exit":   "process.stdout.write('out'); process.stderr.write('err'); process.exit(3);\n",
	"syntax": "console.log('never';\n",
	"signal": "console.log('before'); process.kill(process.pid, 'SIGTERM');\n",
	"reject": "Promise.reject(new Error('rejected'));\n",
	"timer":  "setTimeout(() => console.log('later', require.main.filename), 20); console.log('now');\n",
	"bom":    "\ufeffconsole.log('bom', __filename);\n",
	"module": "console.log(require('./helper.js').x, module.children.map(m => m.id));\n",
}

// js builds a run request for a Node.js program in main.js, with a
// helper.js beside it.
func (tb *testBundle) js(code string, mods ...func(*agent.Step)) *agent.RunRequest {
	return tb.request([]string{"node", "main.js"},
		[]agent.File{{Path: "main.js", Data: []byte(code)}, {Path: "helper.js", Data: []byte("exports.x = 42;\n")}}, mods...)
}

// setupNode is setup with the javascript image.
func setupNode(t *testing.T, backend string, o setupOpts) *testBundle {
	tb := setup(t, backend, o)
	tb.spec.Image = "sandq/javascript:latest"
	return tb
}

// TestPrestartNodeIsAColdStart runs each ending cold and in the process
// started for it on a FIFO (requireSameAsCold): byte-identical results.
func TestPrestartNodeIsAColdStart(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupNode(t, backend, setupOpts{})
		for name, code := range nodeEndings {
			cold := requireSameAsCold(t, name, func(mods ...func(*agent.Step)) agent.StepResult { return tb.runReq(t, tb.js(code, mods...)) })
			switch name {
			case "probe":
				require.Contains(t, stdout(cold), `"filename": "/work/main.js"`, "the probe ran: %s", stderr(cold))
				require.Contains(t, stderr(cold), "Error: probe")
			case "module":
				require.Equal(t, "42 [ '/work/helper.js' ]\n", stdout(cold), stderr(cold))
			}
		}
	})
}

// TestPrestartNodeFallsBackCold: a run that differs from the step started
// on the FIFO in anything Node reads before its script (env, argv, stdin,
// rlimits, a package.json, which decides how the script is loaded) starts
// cold, and right; the waiting process is killed first and never runs its
// code. A step whose env names files Node reads as it starts is never
// started ahead.
func TestPrestartNodeFallsBackCold(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupNode(t, backend, setupOpts{})
		prestart := func(s *agent.Step) { s.Prestart = true }
		show := "console.log(process.argv.slice(2), process.env.X, require('fs').readFileSync(0, 'utf8'), typeof require);\n"
		withFile := func(path, data string) func(*agent.RunRequest) {
			return func(r *agent.RunRequest) { r.Files = append(r.Files, agent.File{Path: path, Data: []byte(data)}) }
		}
		esm := "import { basename } from 'path';\nconsole.log('esm', basename(import.meta.url), typeof require);\n"
		cases := []struct {
			name string
			code string
			mod  func(*agent.Step)
			req  func(*agent.RunRequest)
			want string
		}{
			{"env", show, func(s *agent.Step) { s.Env = append(s.Env, "X=1") }, nil, "[] 1  function\n"},
			{"argv", show, func(s *agent.Step) { s.Argv = append(s.Argv, "a") }, nil, "[ 'a' ] undefined  function\n"},
			{"stdin", show, func(s *agent.Step) { s.Stdin = []byte("in") }, nil, "[] undefined in function\n"},
			{"rlimits", show, func(s *agent.Step) { s.Rlimits.CPU = 30 }, nil, "[] undefined  function\n"},
			{"not asked", show, func(s *agent.Step) { s.Prestart = false }, nil, "[] undefined  function\n"},
			{"package.json", esm, func(*agent.Step) {}, withFile("package.json", `{"type": "module"}`), "esm main.js undefined\n"},
			{"staging name", show, func(*agent.Step) {}, withFile(".sandq-prestart-main.js", "x"), "[] undefined  function\n"},
		}
		for _, c := range cases {
			// Two matching runs: the second runs in the process the first
			// left.
			tb.runReq(t, tb.js(show, prestart))
			require.True(t, tb.runReq(t, tb.js(show, prestart)).Prestarted, c.name)
			req := tb.js(c.code, prestart, c.mod)
			if c.req != nil {
				c.req(req)
			}
			r := tb.runReq(t, req)
			require.False(t, r.Prestarted, c.name)
			require.Equal(t, 0, r.ExitCode, "%s: %s", c.name, stderr(r))
			require.Equal(t, c.want, stdout(r), c.name)
		}
		// An env naming a file Node.js reads as it starts, in the work
		// dir: a start ahead of the run's files would not find it (and
		// warn on the run's stderr). Never started ahead.
		ca := func(r *agent.RunRequest) *agent.RunRequest {
			r.Files = append(r.Files, agent.File{Path: "ca.pem", Data: selfSignedPEM(t)})
			return r
		}
		opts := func(s *agent.Step) { s.Env = append(s.Env, "NODE_EXTRA_CA_CERTS=ca.pem") }
		for i := range 3 {
			r := tb.runReq(t, ca(tb.js(show, prestart, opts)))
			require.Equal(t, "", stderr(r), "NODE_EXTRA_CA_CERTS, run %d", i)
			require.Equal(t, "[] undefined  function\n", stdout(r))
			require.False(t, r.Prestarted, "NODE_EXTRA_CA_CERTS, run %d", i)
		}
	})
}

// TestPrestartNodeJobLimits: a job fed to a FIFO start is held to its limits
// as a cold one is, and what it does to itself ends as its own result: past
// its timeout it is killed and reported timed out, over the container's
// memory it is OOM-killed; then the container runs the next job.
func TestPrestartNodeJobLimits(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupNode(t, backend, setupOpts{limits: jobs.Limits{MemoryMB: 128}})
		prestart := func(s *agent.Step) { s.Prestart = true }
		for name, c := range map[string]struct {
			code string
			hit  func(agent.StepResult) bool
			// The step's timeout: short where it is the limit hit; long
			// enough for the memory job to grow past its limit under
			// gVisor on a slow machine (there it starts in about 0.5 s of
			// CPU and grows about 125 MiB/s), where it only bounds a
			// failure.
			timeout time.Duration
		}{
			"timeout": {"while (true) {}\n", func(r agent.StepResult) bool { return r.TimedOut }, 2 * time.Second},
			"memory":  {"const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));\n", func(r agent.StepResult) bool { return r.OOMKilled }, 30 * time.Second},
		} {
			timed := func(s *agent.Step) { s.Timeout = c.timeout }
			tb.runReq(t, tb.js("console.log(1)\n", prestart))
			warm := tb.runReq(t, tb.withJobLimit(tb.js(c.code, prestart, timed)))
			require.True(t, warm.Prestarted, name)
			require.True(t, c.hit(warm), "%s, prestarted: %+v", name, warm)
			cold := tb.runReq(t, tb.withJobLimit(tb.js(c.code, timed)))
			require.False(t, cold.Prestarted, name)
			require.True(t, c.hit(cold), "%s, cold: %+v", name, cold)
			require.Equal(t, cold.Signal, warm.Signal, name)
			next := tb.runReq(t, tb.js("console.log('next')\n"))
			require.Equal(t, "next\n", stdout(next), "%s: %s", name, stderr(next))
		}
	})
}

// selfSignedPEM returns a self-signed CA certificate, PEM-encoded.
func selfSignedPEM(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
