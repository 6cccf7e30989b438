package measure

import (
	"errors"
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

func TestPct(t *testing.T) {
	t.Parallel()
	p := Phase{Lat: []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	require.Equal(t, time.Duration(6), p.Pct(0.5))
	require.Equal(t, time.Duration(10), p.Pct(0.99))
	require.Equal(t, time.Duration(0), Phase{}.Pct(0.5))
}
