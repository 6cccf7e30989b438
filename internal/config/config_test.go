package config_test

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/internal/config"
)

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	var r config.Redis
	var a artifacts.Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	r.Register(fs, "ttl")
	a.RegisterFlags(fs) // annotated by the artifacts package, served here
	require.NoError(t, fs.Parse([]string{"--prefix", "flag"}))
	env := map[string]string{
		"SANDQ_REDIS_ADDR": "r:1", "SANDQ_PREFIX": "env", "SANDQ_RESULT_TTL": "1h", "SANDQ_S3_BUCKET": "b",
	}
	require.NoError(t, config.ApplyEnv(fs, func(k string) string { return env[k] }))
	require.Equal(t, config.Redis{Addr: "r:1", Prefix: "flag", ResultTTL: time.Hour}, r, "a flag wins over its variable")
	require.Equal(t, "b", a.S3.Bucket, "the artifact store's flags take their variables too")
	require.False(t, fs.Lookup("redis").Changed, "a value from the environment is not marked given")

	env["SANDQ_REDIS_DB"] = "x"
	require.ErrorContains(t, config.ApplyEnv(fs, func(k string) string { return env[k] }), `SANDQ_REDIS_DB="x" (for --redis-db)`)
	require.Equal(t, "SANDQ_S3_BUCKET", config.EnvName(fs.Lookup("s3-bucket")))
}
