package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SANDQ_CONCURRENCY": "7", "SANDQ_REDIS_ADDR": "redis.example:6379", "SANDQ_S3_BUCKET": "b2",
	}
	getenv := func(k string) string { return env[k] }
	c, err := parseFlags([]string{"--redis", "10.0.0.1:6379", "--caps", `{"timeout_ms":60000,"memory_mb":512}`, "--defaults", `{"timeout_ms":5000}`}, getenv)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:6379", c.redis.Addr, "a flag wins over the environment")
	require.Equal(t, 7, c.concurrency, "the environment wins over the default")
	require.Equal(t, "b2", c.artifacts.S3.Bucket, "the artifact store's flags take the environment too")
	require.Equal(t, 7, c.maxPerPool, "max-per-pool follows concurrency")
	require.EqualValues(t, 60000, c.policy.MaxLimits.TimeoutMS)
	require.EqualValues(t, 512, c.policy.MaxLimits.MemoryMB)
	require.EqualValues(t, 5000, c.policy.DefaultLimits.TimeoutMS)
	require.Equal(t, 2*time.Millisecond, c.pollInterval)

	c, err = parseFlags(nil, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, runtime.NumCPU(), c.concurrency, "one job per CPU by default")

	for _, tt := range []struct {
		args []string
		env  string
		err  string
	}{
		{args: []string{"--concurrency", "0"}, err: "--concurrency = 0"},
		{args: []string{"--backend", "lxc"}, err: `--backend "lxc"`},
		{args: []string{"--caps", `{"timeout":1}`}, err: `--caps: json: unknown field "timeout"`},
		{args: []string{"--defaults", `{`}, err: "--defaults"},
		{env: "many", err: `SANDQ_CONCURRENCY="many" (for --concurrency)`},
		{args: []string{"--max-result-bytes", "1000"}, err: "--max-result-bytes = 1000, want >= 262144"},
		{args: []string{"--inputs-prefix", "sandq/inputs"}, err: `--inputs-prefix "sandq/inputs" overlaps --artifact-prefix "sandq"`},
		{args: []string{"--artifact-prefix", ""}, err: `--inputs-prefix "sandq-inputs" overlaps --artifact-prefix ""`},
	} {
		_, err := parseFlags(tt.args, func(k string) string {
			if k == "SANDQ_CONCURRENCY" {
				return tt.env
			}
			return ""
		})
		require.ErrorContains(t, err, tt.err, tt.args)
	}
}
