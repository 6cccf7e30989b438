package sandbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
)

// rubyProbe prints everything a Ruby program can see of how it was started
// that is not different in every process anyway (pids, times): argv, its
// own name and file, what is loaded and from where, the gems, encodings,
// cwd, env, standard streams and stdin, credentials, parent, limits,
// signal state, capabilities, open fds, the work dir, its own file as read
// back, the stack.
const rubyProbe = `require 'json'
read = ->(p) { File.read(p) rescue $!.class.name }
status = read.('/proc/self/status').lines.map { _1.chomp.split(":\t", 2) }.to_h.slice(
  'Umask', 'Uid', 'Gid', 'Groups', 'SigQ', 'SigPnd', 'ShdPnd', 'SigBlk', 'SigIgn', 'SigCgt', 'CapInh', 'CapPrm',
  'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'Cpus_allowed_list')
streams = [STDIN, STDOUT, STDERR].map { |io| st = io.stat; [st.ftype, st.mode, io.tty?, io.external_encoding.to_s] }
puts JSON.pretty_generate(
  argv: ARGV, program: $0, file: __FILE__, dir: __dir__, line: __LINE__, encoding: __ENCODING__.to_s,
  external: Encoding.default_external.to_s, internal: Encoding.default_internal.to_s,
  verbose: $VERBOSE, debug: $DEBUG, features: $LOADED_FEATURES, load_path: $LOAD_PATH,
  gems: Gem.loaded_specs.keys.sort, gem_path: Gem.path, frozen: "".frozen?, cwd: Dir.pwd, env: ENV.to_h,
  streams: streams, stdin: STDIN.read, ids: [Process.uid, Process.euid, Process.gid, Process.egid, Process.groups],
  ppid: Process.ppid, sid: Process.getsid == Process.pid, pgrp: Process.getpgrp == Process.pid,
  status: status, limits: read.('/proc/self/limits'), nice: Process.getpriority(Process::PRIO_PROCESS, 0),
  oom: read.('/proc/self/oom_score_adj'), cgroup: read.('/proc/self/cgroup'), fds: Dir.children('/proc/self/fd').sort,
  threads: Thread.list.size, cmdline: read.('/proc/self/cmdline'), exe: File.readlink('/proc/self/exe'),
  work: Dir.children('.').sort.map { st = File.lstat(_1); [_1, st.mode, st.uid, st.size] },
  self: File.read(__FILE__).lines.first, stack: caller_locations(0).map(&:to_s))
raise 'probe'
`

// rubyEndings are the ways a Ruby script ends, each compared between a
// cold start and a FIFO start: an uncaught exception (the probe), an exit
// status with output on both streams and no newline, syntax errors on the
// first line and after it (Ruby prints the line and a caret), an error
// Ruby spots in the source (error_highlight, did_you_mean), a signal,
// at_exit handlers, a file beside the script, magic comments (a two-byte
// lead), a byte-order mark, abort, exit!, a thread, a warning.
var rubyEndings = map[string]string{
	"probe":      rubyProbe,
	"exit":       "$stdout.write('out'); $stderr.write('err'); exit 3\n",
	"syntax":     "puts(1 +\n",
	"syntax2":    "puts 1\ndef x(\n",
	"highlight":  "x = nil; x.foo(1)\n",
	"didyoumean": "p [1, 2].frist\n",
	"signal":     "puts 'before'; $stdout.flush; Process.kill(:TERM, $$); sleep 1\n",
	"at_exit":    "at_exit { puts 'bye', $!.inspect }; raise ArgumentError, 'late'\n",
	"relative":   "p require_relative('helper'), HELPER, $LOADED_FEATURES.grep(/helper/)\n",
	"magic":      "# encoding: ascii-8bit\n# frozen_string_literal: true\np __ENCODING__, \"\\xff\".encoding, ''.frozen?, __LINE__\n",
	"bom":        "\ufeffp __ENCODING__, __FILE__\nputs(1 +\n",
	"abort":      "abort('gave up')\n",
	"exit!":      "print 'unflushed'; exit!(4)\n",
	"thread":     "Thread.report_on_exception = false; t = Thread.new { raise 'in thread' }; (t.join rescue p $!); p t.status\n",
	"warn":       "warn 'careful'; $VERBOSE = true; def m; x = 1; end; p m\n",
}

// rubySettled are the endings also run after the process started for them
// has loaded RubyGems and waits (the others may come while it boots).
var rubySettled = map[string]bool{"probe": true, "relative": true, "magic": true, "bom": true}

// rubyBoot is longer than a Ruby FIFO start takes to get to its wait on a
// backend: its boot probes the work dir, and a file the run writes earlier
// would be seen by the boot as a cold start sees it.
func rubyBoot(backend string) time.Duration {
	if backend == "gvisor" {
		return 3 * time.Second
	}
	return time.Second
}

// rb builds a run request for a Ruby program in main.rb, with a helper.rb
// beside it.
func (tb *testBundle) rb(code string, mods ...func(*agent.Step)) *agent.RunRequest {
	return tb.request([]string{"ruby", "main.rb"},
		[]agent.File{{Path: "main.rb", Data: []byte(code)}, {Path: "helper.rb", Data: []byte("HELPER = 42\n")}}, mods...)
}

// setupRuby is setup with the ruby image.
func setupRuby(t *testing.T, backend string, o setupOpts) *testBundle {
	tb := setup(t, backend, o)
	tb.spec.Image = "sandq/ruby:latest"
	return tb
}

// TestPrestartRubyIsAColdStart runs each ending cold and in the process
// started for it on a FIFO, fed the script's first bytes at its start
// (requireSameAsCold): byte-identical results.
func TestPrestartRubyIsAColdStart(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupRuby(t, backend, setupOpts{})
		for name, code := range rubyEndings {
			cold := requireSameAsCold(t, name, func(mods ...func(*agent.Step)) agent.StepResult {
				if len(mods) > 0 && rubySettled[name] {
					time.Sleep(rubyBoot(backend)) // the prestart has booted: jobs that come apart
				}
				return tb.runReq(t, tb.rb(code, mods...))
			})
			switch name {
			case "probe":
				require.Contains(t, stdout(cold), `"file": "main.rb"`, "the probe ran: %s", stderr(cold))
				require.Contains(t, stderr(cold), ": probe (RuntimeError)")
			case "relative":
				require.Equal(t, "true\n42\n[\"/work/helper.rb\"]\n", stdout(cold), stderr(cold))
			case "syntax":
				require.Contains(t, stderr(cold), "puts(1 +\n        ^", "Ruby shows the line and the caret")
			case "highlight":
				require.Contains(t, stderr(cold), "x.foo(1)\n          ^^^^", "error_highlight spots the call")
			}
		}
	})
}

// TestPrestartRubyFallsBackCold: a run the Ruby started for it cannot
// serve as a cold start would starts cold, and right: it differs in what
// Ruby reads before its script (env, argv, stdin, rlimits), its script
// begins otherwise than the bytes fed ahead, or it has DATA (__END__); the
// waiting process is killed first and never runs its code. A step whose
// env could point Ruby's start-up at the work dir, or whose script begins
// with "#!" (whose switches Ruby reads before RubyGems), is never started
// ahead. A file named as a feature Ruby provides at boot (it resolves them
// against the work dir: a require_relative of it is then taken as loaded)
// starts cold: every name of the image's Ruby is tried.
func TestPrestartRubyFallsBackCold(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupRuby(t, backend, setupOpts{})
		prestart := func(s *agent.Step) { s.Prestart = true }
		show := "p ARGV, ENV['X'], STDIN.read\n"
		withFile := func(path, data string) func(*agent.RunRequest) {
			return func(r *agent.RunRequest) { r.Files = append(r.Files, agent.File{Path: path, Data: []byte(data)}) }
		}
		type tcase struct {
			name   string
			code   string
			mod    func(*agent.Step)
			req    func(*agent.RunRequest)
			settle bool // let the process started for it boot first
		}
		cases := []tcase{
			{"env", show, func(s *agent.Step) { s.Env = append(s.Env, "X=1") }, nil, false},
			{"argv", show, func(s *agent.Step) { s.Argv = append(s.Argv, "a") }, nil, false},
			{"stdin", show, func(s *agent.Step) { s.Stdin = []byte("in") }, nil, false},
			{"rlimits", show, func(s *agent.Step) { s.Rlimits.CPU = 30 }, nil, false},
			{"not asked", show, func(s *agent.Step) { s.Prestart = false }, nil, false},
			{"another first byte", "q = 1; " + show, func(*agent.Step) {}, nil, false},
			{"shebang", "#!/usr/bin/ruby -W0\nwarn 'quiet?'; " + show, func(*agent.Step) {}, nil, false},
			{"DATA", "print DATA.read; DATA.rewind; print DATA.read.size\n__END__\ndata\n", func(*agent.Step) {}, nil, false},
			{"staging name", show, func(*agent.Step) {}, withFile(".sandq-prestart-main.rb", "x"), false},
		}
		// The features Ruby provides at boot under a relative name, from
		// the image's own Ruby.
		boot := tb.runReq(t, tb.rb("puts $LOADED_FEATURES.grep_v(%r{/})\n"))
		require.Equal(t, 0, boot.ExitCode, stderr(boot))
		features := strings.Fields(stdout(boot))
		require.Contains(t, features, "thread.rb", "the probe of Ruby's boot features ran")
		for _, name := range features {
			base := strings.TrimSuffix(strings.TrimSuffix(name, ".rb"), ".so")
			cases = append(cases, tcase{"file " + name, "p require_relative('" + base + "') rescue p $!.class\n" + show,
				func(*agent.Step) {}, withFile(name, "puts 'loaded'\n"), true})
		}
		for _, c := range cases {
			build := func(mods ...func(*agent.Step)) *agent.RunRequest {
				req := tb.rb(c.code, append(mods, c.mod)...)
				if c.req != nil {
					c.req(req)
				}
				return req
			}
			cold := tb.runReq(t, build())
			require.False(t, cold.Prestarted, c.name)
			// Two matching runs: the second runs in the process the first
			// left.
			tb.runReq(t, tb.rb(show, prestart))
			require.True(t, tb.runReq(t, tb.rb(show, prestart)).Prestarted, c.name)
			if c.settle {
				time.Sleep(rubyBoot(backend))
			}
			r := tb.runReq(t, build(prestart))
			require.Equal(t, cold.ExitCode, r.ExitCode, "%s: %s", c.name, stderr(r))
			require.Equal(t, stdout(cold), stdout(r), c.name)
			require.Equal(t, stderr(cold), stderr(r), c.name)
			require.False(t, r.Prestarted, c.name)
		}

		// Never started ahead: a step with an env that could point Ruby's
		// start-up at the work dir, a script that begins with "#!" or is
		// empty.
		never := []struct {
			name string
			code string
			mod  func(*agent.Step)
		}{
			{"RUBYOPT", show, func(s *agent.Step) { s.Env = append(s.Env, "RUBYOPT=-W0") }},
			{"RUBYLIB", show, func(s *agent.Step) { s.Env = append(s.Env, "RUBYLIB=.") }},
			{"GEM_PATH", show, func(s *agent.Step) { s.Env = append(s.Env, "GEM_PATH=/work") }},
			{"XDG_DATA_HOME", show, func(s *agent.Step) { s.Env = append(s.Env, "XDG_DATA_HOME=/work") }},
			{"HOME", show, func(s *agent.Step) { s.Env = append(s.Env, "HOME=/work") }},
			{"shebang", "#!/usr/bin/ruby\n" + show, func(*agent.Step) {}},
			{"empty", "", func(*agent.Step) {}},
		}
		for _, c := range never {
			for i := range 2 {
				r := tb.runReq(t, tb.rb(c.code, prestart, c.mod))
				require.False(t, r.Prestarted, "%s, run %d", c.name, i)
				require.Equal(t, 0, r.ExitCode, "%s: %s", c.name, stderr(r))
			}
		}
	})
}

// TestPrestartRubyJobLimits: a job fed to a Ruby FIFO start is held to its
// limits as a cold one is: past its timeout it is killed and reported
// timed out, over the container's memory it is OOM-killed; then the
// container runs the next job.
func TestPrestartRubyJobLimits(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupRuby(t, backend, setupOpts{limits: jobs.Limits{MemoryMB: 128}})
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
			"timeout": {"loop {}\n", func(r agent.StepResult) bool { return r.TimedOut }, 2 * time.Second},
			"memory":  {"a = []; loop { a << ('x' * (1 << 20)) }\n", func(r agent.StepResult) bool { return r.OOMKilled }, 30 * time.Second},
		} {
			timed := func(s *agent.Step) { s.Timeout = c.timeout }
			tb.runReq(t, tb.rb(c.code[:1]+" = 1\n", prestart)) // the same first byte
			warm := tb.runReq(t, tb.withJobLimit(tb.rb(c.code, prestart, timed)))
			require.True(t, warm.Prestarted, name)
			require.True(t, c.hit(warm), "%s, prestarted: %+v", name, warm)
			cold := tb.runReq(t, tb.withJobLimit(tb.rb(c.code, timed)))
			require.False(t, cold.Prestarted, name)
			require.True(t, c.hit(cold), "%s, cold: %+v", name, cold)
			require.Equal(t, cold.Signal, warm.Signal, name)
			next := tb.runReq(t, tb.rb("puts 'next'\n"))
			require.Equal(t, "next\n", stdout(next), "%s: %s", name, stderr(next))
		}
	})
}
