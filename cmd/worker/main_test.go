package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/worker"
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
	require.Equal(t, 100*time.Millisecond, c.pollInterval)

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
		{args: []string{"--warm-sessions", "python,go"}, err: `--warm-sessions: "go" has no sessions (sessions: `},
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

// TestServerConfig: the flags reach the worker's ServerConfig, with the
// command line's own conventions mapped to the packages'.
func TestServerConfig(t *testing.T) {
	t.Parallel()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, []byte("PEM"), 0o600))
	noEnv := func(string) string { return "" }
	c, err := parseFlags([]string{"--concurrency", "3", "--warm", "python, node,", "--warm-sessions", "python",
		"--max-sessions", "2", "--prestart-hold", "0", "--no-pin-cpus", "--libs-max-total-mb", "5",
		"--install-ca-bundle", ca, "--metrics-addr", "", "--owner", "w1"}, noEnv)
	require.NoError(t, err)
	sc, err := serverConfig(c, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, 3, sc.Concurrency)
	require.Equal(t, 3, sc.Pool.MaxTotal, "--max-per-pool follows --concurrency")
	require.Equal(t, []string{"python", "node"}, sc.Warm)
	require.Equal(t, []string{"python"}, sc.WarmSessions)
	require.Equal(t, 2, sc.MaxSessions)
	require.Equal(t, time.Duration(-1), sc.Pool.PrestartHold, "--prestart-hold 0 keeps the interpreter: negative in the pool's config")
	require.NotNil(t, sc.Pool.PinCPUs)
	require.Empty(t, sc.Pool.PinCPUs, "--no-pin-cpus: empty and non-nil")
	require.Equal(t, int64(5<<20), sc.LibsMaxBytes)
	require.Equal(t, []byte("PEM"), sc.Handler.Install.CABundle)
	require.Empty(t, sc.MetricsAddr)
	require.Equal(t, "w1", sc.Owner)
	require.True(t, sc.PublishVersions, "published by default")
	_, err = worker.NewServer(sc)
	require.NoError(t, err)

	c, err = parseFlags(nil, noEnv)
	require.NoError(t, err)
	sc, err = serverConfig(c, zerolog.Nop())
	require.NoError(t, err)
	require.Nil(t, sc.Pool.PinCPUs, "pinned to this host's CPUs by default")
	require.Equal(t, "127.0.0.1:9464", sc.MetricsAddr)
	require.Equal(t, 30*time.Second, sc.ShutdownTimeout)

	c.installCA = filepath.Join(t.TempDir(), "missing.pem")
	_, err = serverConfig(c, zerolog.Nop())
	require.ErrorContains(t, err, "--install-ca-bundle: ")
}

// TestCompileCacheDir: a worker's compile cache directory is named for its
// PID; at start a worker removes the directories of workers that are gone
// (killed ones leave theirs), and leaves those of live processes and
// anything not named so.
func TestCompileCacheDir(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	mk := func(name string) string {
		d := filepath.Join(tmp, name)
		require.NoError(t, os.MkdirAll(filepath.Join(d, "sub"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(d, "sub", "main"), []byte("x"), 0o600))
		return d
	}
	dead := mk(fmt.Sprintf("sandq-compile-cache-%d-123", gone.Process.Pid))
	live := mk("sandq-compile-cache-1-456") // PID 1 lives
	other := mk("sandq-compile-cache-junk")
	unrelated := mk("something-else")

	dir, err := compileCacheDir(tmp, zerolog.Nop())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("sandq-compile-cache-%d-", os.Getpid())), dir)
	require.DirExists(t, dir)
	require.NoDirExists(t, dead, "a gone worker's directory is removed")
	for _, d := range []string{live, other, unrelated} {
		require.DirExists(t, d)
	}
	// A second worker of the same process's PID keeps the first's.
	again, err := compileCacheDir(tmp, zerolog.Nop())
	require.NoError(t, err)
	require.DirExists(t, dir)
	require.NotEqual(t, dir, again)
}
