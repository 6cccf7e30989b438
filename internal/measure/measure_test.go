package measure

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	t.Parallel()
	calls := make(chan struct{}, 100)
	p, err := Run("x", 100, 4, func() error { calls <- struct{}{}; return nil })
	require.NoError(t, err)
	require.Len(t, calls, 100)
	require.Len(t, p.Lat, 100)
	require.Equal(t, 4, p.Conc)
	require.Positive(t, p.Rate())

	_, err = Run("y", 10, 2, func() error { return errors.New("boom") })
	require.ErrorContains(t, err, "y: job")
}

func TestInterleave(t *testing.T) {
	t.Parallel()
	var order []string
	job := func(name string, d time.Duration) Job {
		return Job{Name: name, Run: func() error { order = append(order, name); time.Sleep(d); return nil }}
	}
	ps, err := Interleave(4, job("a", time.Millisecond), job("b", 3*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "b", "a", "a", "b", "b", "a"}, order, "turns, who goes first rotating")
	require.Len(t, ps, 2)
	require.Equal(t, "a", ps[0].Name)
	require.Len(t, ps[1].Lat, 4)
	require.Equal(t, 1, ps[1].Conc)
	require.Greater(t, ps[1].Pct(0.5), ps[0].Pct(0.5))
	require.GreaterOrEqual(t, ps[1].Wall, 12*time.Millisecond, "Wall sums the job's own latencies")
	require.Less(t, ps[1].Wall, ps[0].Wall+ps[1].Wall)

	_, err = Interleave(2, Job{Name: "ok", Run: func() error { return nil }}, Job{Name: "bad", Run: func() error { return errors.New("boom") }})
	require.ErrorContains(t, err, "bad: job 0: boom")
}

func TestTurns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	counts := map[string]int{}
	job := func(name string, d time.Duration) Job {
		return Job{Name: name, Run: func() error {
			mu.Lock()
			counts[name]++
			mu.Unlock()
			time.Sleep(d)
			return nil
		}, Around: func(turn func()) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			turn()
		}}
	}
	ps, err := Turns(10, 2, 4, job("a", time.Millisecond), job("b", 4*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "b", "a", "a", "b", "b", "a"}, order, "rounds, who goes first rotating")
	require.Equal(t, map[string]int{"a": 10, "b": 10}, counts, "n runs a job over the rounds (3, 3, 2, 2)")
	require.Len(t, ps, 2)
	require.Equal(t, "b", ps[1].Name)
	require.Equal(t, 2, ps[1].Conc)
	require.Len(t, ps[0].Lat, 10)
	require.Len(t, ps[1].Lat, 10)
	require.True(t, slices.IsSorted(ps[1].Lat))
	require.GreaterOrEqual(t, ps[1].Wall, 5*4*time.Millisecond, "Wall sums the turns' walls: 10 runs of 4 ms at c=2")
	require.Greater(t, ps[0].Rate(), ps[1].Rate())

	_, err = Turns(4, 1, 2, Job{Name: "ok", Run: func() error { return nil }}, Job{Name: "bad", Run: func() error { return errors.New("boom") }})
	require.ErrorContains(t, err, "turn 0: bad: job 0: boom")
	_, err = Turns(3, 1, 10, Job{Name: "few", Run: func() error { return nil }})
	require.NoError(t, err, "more turns than runs: a run a turn")
}

func TestPct(t *testing.T) {
	t.Parallel()
	p := Phase{Lat: []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	require.Equal(t, time.Duration(6), p.Pct(0.5))
	require.Equal(t, time.Duration(10), p.Pct(0.99))
	require.Equal(t, time.Duration(0), Phase{}.Pct(0.5))
}
