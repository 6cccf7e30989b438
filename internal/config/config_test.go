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

func TestRedisTopology(t *testing.T) {
	for _, tt := range []struct {
		r          config.Redis
		mode, key  string
		addrs      []string
		invalidMsg string
	}{
		{r: config.Redis{Addr: "r:1", Prefix: "sandq"}, mode: "single", key: "sandq", addrs: []string{"r:1"}},
		{r: config.Redis{Addr: "a:1, b:2,c:3", Prefix: "sandq"}, mode: "cluster", key: "{sandq}", addrs: []string{"a:1", "b:2", "c:3"}},
		{r: config.Redis{Addr: "a:1", Cluster: true, Prefix: "{mine}"}, mode: "cluster", key: "{mine}", addrs: []string{"a:1"}},
		{r: config.Redis{Addr: "s1:26379,s2:26379", MasterName: "m", Prefix: "sandq"}, mode: "sentinel", key: "sandq", addrs: []string{"s1:26379", "s2:26379"}},
		{r: config.Redis{Addr: "a:1,b:2", DB: 3}, mode: "cluster", invalidMsg: "database 0"},
		{r: config.Redis{Addr: "a:1", MasterName: "m", Cluster: true}, mode: "sentinel", invalidMsg: "not both"},
		{r: config.Redis{Addr: " , "}, mode: "single", invalidMsg: "no address"},
		{r: config.Redis{Addr: "a:1", TLSCA: "/nonexistent.pem"}, mode: "single", invalidMsg: "--redis-tls-ca"},
	} {
		require.Equal(t, tt.mode, tt.r.Mode(), "%+v", tt.r)
		err := tt.r.Check()
		if tt.invalidMsg != "" {
			require.ErrorContains(t, err, tt.invalidMsg)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.key, tt.r.KeyPrefix())
		require.Equal(t, map[bool]int{true: 1}[tt.mode == "sentinel"], tt.r.StoreConfig().SyncReplicas,
			"behind Sentinel a final Result waits for a replica")
		o := tt.r.Options()
		require.Equal(t, tt.addrs, o.Addrs)
		require.Equal(t, tt.mode == "cluster", o.IsClusterMode)
		require.Equal(t, tt.r.MasterName, o.MasterName)
	}
	o := config.Redis{Addr: "a:1", TLS: true}.Options()
	require.NotNil(t, o.TLSConfig, "--redis-tls")
}
