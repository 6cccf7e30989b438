package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("SANDQ_CONCURRENCY", "7")
	t.Setenv("SANDQ_REDIS_ADDR", "redis.example:6379")
	c, err := parseFlags([]string{"--redis", "10.0.0.1:6379", "--caps", `{"timeout_ms":60000,"memory_mb":512}`, "--defaults", `{"timeout_ms":5000}`})
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:6379", c.redisAddr, "a flag wins over the environment")
	require.Equal(t, 7, c.concurrency, "the environment wins over the default")
	require.Equal(t, 7, c.maxPerPool, "max-per-pool follows concurrency")
	require.EqualValues(t, 60000, c.policy.MaxLimits.TimeoutMS)
	require.EqualValues(t, 512, c.policy.MaxLimits.MemoryMB)
	require.EqualValues(t, 5000, c.policy.DefaultLimits.TimeoutMS)
	require.Equal(t, 10*time.Millisecond, c.pollInterval)

	t.Setenv("SANDQ_CONCURRENCY", "")
	c, err = parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, runtime.NumCPU(), c.concurrency, "one job per CPU by default")

	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"--concurrency", "0"}, "--concurrency = 0"},
		{[]string{"--backend", "lxc"}, `--backend "lxc"`},
		{[]string{"--caps", `{"timeout":1}`}, `--caps: json: unknown field "timeout"`},
		{[]string{"--defaults", `{`}, "--defaults"},
	} {
		_, err := parseFlags(tt.args)
		require.ErrorContains(t, err, tt.err, tt.args)
	}
}
