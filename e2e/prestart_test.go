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
	var got []bool
	for range 3 {
		r := e.wait(e.enqueue(probe), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
		require.Equal(t, want, r.Stdout)
		got = append(got, r.Usage.Prestarted)
	}
	require.Equal(t, []bool{false, true, true}, got, "the first job in a new container starts cold; the next ones do not")

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
