package sandbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPickIdle(t *testing.T) {
	now := time.Now()
	idle := func(ages ...time.Duration) []*Container { // oldest first
		var cs []*Container
		for _, a := range ages {
			cs = append(cs, &Container{idleSince: now.Add(-a)})
		}
		return cs
	}
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		ages []time.Duration
		want int
	}{
		{"one", []time.Duration{ms}, 0},
		{"all settled: the most recent", []time.Duration{300 * ms, 200 * ms, 100 * ms}, 2},
		{"the most recent settled one", []time.Duration{300 * ms, 30 * ms, 5 * ms}, 1},
		{"none settled: the oldest", []time.Duration{20 * ms, 10 * ms, 1 * ms}, 0},
	} {
		require.Equal(t, c.want, pickIdle(idle(c.ages...), now), c.name)
	}
}
