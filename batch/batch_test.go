package batch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sandq/sandq/langs"

	"github.com/sandq/sandq/client"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/jobs"
)

func TestDerivedIDs(t *testing.T) {
	t.Parallel()
	read := func(in, prefix string) []string {
		lines, bad, err := ReadJobs(strings.NewReader(in), jobs.QueueBatch, NewIDs(prefix), langs.Policy(jobs.Policy{}).Validate)
		require.NoError(t, err)
		require.Empty(t, bad)
		var ids []string
		for _, l := range lines {
			ids = append(ids, l.Job.ID)
		}
		return ids
	}
	in := `{"lang": "python", "code": "print(1)"}` + "\n" + `{"code": "print(1)",   "lang": "python"}` + "\n" + `{"lang": "python", "code": "print(2)"}` + "\n"
	ids := read(in, "b-")
	require.Len(t, ids, 3)
	require.NotEqual(t, ids[0], ids[1], "identical jobs get distinct IDs")
	require.Equal(t, ids, read(in, "b-"), "stable across runs")
	for _, id := range ids {
		require.True(t, jobs.ValidID(id), id)
		require.True(t, strings.HasPrefix(id, "b-"))
	}
	// Moving a line keeps its ID; a new prefix gives new jobs.
	moved := read(`{"lang": "python", "code": "print(2)"}`+"\n"+in, "b-")
	require.Equal(t, ids[2], moved[0])
	require.NotEqual(t, ids[0], read(in, "run2-")[0])
}

// flakyWaiter is the real client.Client whose WaitEach fails, as if Redis
// went away, after every `every` results it passes on.
type flakyWaiter struct {
	*client.Client
	every    int
	mu       sync.Mutex
	failures int
}

var errRedisGone = errors.New("redis: connection refused (injected)")

func (f *flakyWaiter) WaitEach(ctx context.Context, ids <-chan string, fn func(jobs.Result) error) error {
	n := 0
	err := f.Client.WaitEach(ctx, ids, func(r jobs.Result) error {
		if n == f.every {
			f.mu.Lock()
			f.failures++
			f.mu.Unlock()
			return errRedisGone
		}
		n++
		return fn(r)
	})
	return err
}

func TestBatchWaitFailuresLoseNoJob(t *testing.T) {
	t.Parallel()
	ns := jobstest.NewNamespace(t, "batch")
	w := ns.StartFakeWorker(t)
	c := ns.Client(t)

	const n = 60
	todo := make([]jobs.Job, n)
	for i := range todo {
		todo[i] = jobs.Job{ID: fmt.Sprintf("flaky-%d", i), Lang: "python", Code: fmt.Sprintf("print(%d)", i)}
	}
	// A wait that fails after every 25 results is started again; the
	// results it dropped when failing are awaited again, none twice.
	fc := &flakyWaiter{Client: c, every: 25}
	emitted := map[string]int{}
	counts, err := Run(t.Context(), fc, Config{Chunk: 7, Retries: 1}, todo, func(r jobs.Result) error {
		emitted[r.ID]++
		require.Equal(t, jobs.StatusSucceeded, r.Status)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, Counts{Enqueued: n}, counts)
	require.Len(t, emitted, n)
	for id, k := range emitted {
		require.Equal(t, 1, k, id)
	}
	require.Equal(t, 2, fc.failures, "60 results in waits of at most 25")
	require.Len(t, w.RunCounts(), n)

	// Failing without progress ends the batch after Retries+1 tries.
	fc = &flakyWaiter{Client: c, every: 0}
	todo[0].ID = "flaky-stuck"
	_, err = Run(t.Context(), fc, Config{Retries: 1}, todo[:1], func(jobs.Result) error { return nil })
	require.ErrorIs(t, err, errRedisGone)
	require.ErrorContains(t, err, "wait for results")
	require.Equal(t, 2, fc.failures)
}

func TestReadJobsValidatesWithTheGivenPolicy(t *testing.T) {
	t.Parallel()
	in := `{"lang": "python", "code": "print(1)", "limits": {"timeout_ms": 6000}}` + "\n" +
		`{"lang": "python", "code": "print(2)"}` + "\n"
	strict := langs.Policy(jobs.Policy{MaxLimits: jobs.Limits{TimeoutMS: 5000}})
	lines, bad, err := ReadJobs(strings.NewReader(in), jobs.QueueBatch, NewIDs("b-"), strict.Validate)
	require.NoError(t, err)
	require.Len(t, lines, 1)
	require.Equal(t, 2, lines[0].N)
	require.Equal(t, jobs.QueueBatch, lines[0].Job.Queue, "a job without a queue gets the batch's")
	require.Len(t, bad, 1)
	require.Equal(t, 1, bad[0].N)
	var verr *jobs.ValidationError
	require.ErrorAs(t, bad[0], &verr)
	require.Equal(t, "limits.timeout_ms", verr.Field)
}
