package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// TestPrestart: through the queue, a Python job that follows one like it
// in the same warm container runs in the interpreter started for it
// (Usage.Prestarted) and prints what a cold one prints; a job whose env
// differs starts cold; --no-prestart turns it off.
func TestPrestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.startWorker("--concurrency", "1", "--max-per-pool", "1")
	probe := py("import sys, os\nprint(sys.argv, __name__, os.getcwd(), os.environ.get('X'))\n")
	want := "['main.py'] __main__ /work None\n"
	run := func() jobs.Result {
		r := e.wait(e.enqueue(probe), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, want, r.Stdout)
		return r
	}
	require.False(t, run().Usage.Prestarted, "the first job in a new container starts cold")
	// The next runs in the interpreter the one before left. On a machine
	// loaded past the agent's wait for it to be ready, a job starts cold
	// instead (as it must) and leaves another: up to three jobs in all.
	for i := 1; !run().Usage.Prestarted; i++ {
		require.Less(t, i, 3, "%d jobs in a row after the first started cold", i)
	}

	withEnv := probe
	withEnv.Env = map[string]string{"X": "1"}
	r := e.wait(e.enqueue(withEnv), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, "['main.py'] __main__ /work 1\n", r.Stdout)
	require.False(t, r.Usage.Prestarted, "an env the prestarted interpreter did not start with: cold")
	w.signal(syscall.SIGTERM)
	require.NoError(t, w.wait(time.Minute))

	e.startWorker("--concurrency", "1", "--max-per-pool", "1", "--no-prestart")
	for range 3 {
		r := e.wait(e.enqueue(probe), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, want, r.Stdout)
		require.False(t, r.Usage.Prestarted, "--no-prestart")
	}
}

// TestPrestartRuby: through the queue, a Ruby job that follows one whose
// script begins with the same byte, in the same warm container, runs in
// the Ruby started for it (fed that byte, RubyGems loaded) and prints what
// a cold one prints; one that begins otherwise, or sets RUBYOPT, starts
// cold and right.
func TestPrestartRuby(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	requireImage(t, "ruby")
	e.startWorker("--concurrency", "1", "--max-per-pool", "1")
	probe := jobs.Job{Lang: "ruby", Code: "p ARGV, $0, __FILE__, Dir.pwd, ENV['X'], $LOADED_FEATURES.size > 10\n"}
	want := "[]\n\"main.rb\"\n\"main.rb\"\n\"/work\"\nnil\ntrue\n"
	var got []bool
	for range 3 {
		r := e.wait(e.enqueue(probe), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, want, r.Stdout, r.Stderr)
		got = append(got, r.Usage.Prestarted)
	}
	require.Equal(t, []bool{false, true, true}, got, "the first job in a new container starts cold; the next ones do not")

	other := probe
	other.Code = "# another first byte\n" + probe.Code
	r := e.wait(e.enqueue(other), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, want, r.Stdout, r.Stderr)
	require.False(t, r.Usage.Prestarted, "a script that begins otherwise than the bytes fed ahead: cold")

	withOpt := probe
	withOpt.Env = map[string]string{"RUBYOPT": "-W0"}
	for range 2 {
		r := e.wait(e.enqueue(withOpt), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, want, r.Stdout, r.Stderr)
		require.False(t, r.Usage.Prestarted, "RUBYOPT: never started ahead")
	}
}

// TestPrestartTypeScript: through the queue, a TypeScript job that follows
// one like it in the same warm container is compiled by the compiler
// started for it (compile.usage.prestarted), with what a cold compile
// gives: the same output, and the same type errors for a program that has
// them.
func TestPrestartTypeScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	requireImage(t, "typescript")
	e.startWorker("--concurrency", "1", "--max-per-pool", "1")
	ok := jobs.Job{Lang: "typescript", Code: "const xs: number[] = [2, 1];\nconsole.log(xs.sort(), typeof require);\n"}
	var got []bool
	for range 3 {
		r := e.wait(e.enqueue(ok), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, "[ 1, 2 ] function\n", r.Stdout, r.Stderr)
		require.NotNil(t, r.Compile)
		got = append(got, r.Compile.Usage.Prestarted)
	}
	require.Equal(t, []bool{false, true, true}, got, "the first job in a new container compiles cold; the next ones do not")

	bad := jobs.Job{Lang: "typescript", Code: "const n: number = 'x';\n"}
	var outs []string
	for range 2 {
		r := e.wait(e.enqueue(bad), time.Minute)
		require.Equal(t, jobs.StatusCompileError, r.Status, r.Reason)
		require.NotNil(t, r.Compile)
		outs = append(outs, r.Compile.Stdout)
		require.True(t, r.Compile.Usage.Prestarted, "the compile step is the same: started ahead")
	}
	require.Contains(t, outs[0], "main.ts(1,7): error TS2322")
	require.Equal(t, outs[0], outs[1])
}
