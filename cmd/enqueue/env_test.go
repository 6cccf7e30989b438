package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// TestEnvCommands: env create records a recipe (files read from local
// files) for --tenant or shared, is a no-op for the same recipe and an
// error for another; an invalid recipe exits 64 naming the field; list
// shows every tenant's with their build state, show the one a tenant's
// job would use with its build; rm deletes (then 2 for an unknown one);
// run --environment and --allow put the environment and the network
// policy on the queued job.
func TestEnvCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	local := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(local, []byte(`{"a": 1}`), 0o600))

	res := b.cli(t, "", "env", "create", "--tenant", "alice", "--name", "jq", "--lang", "javascript",
		"--package", "jq", "--library", "js-md5@0.8.3", "--file", "/opt/lab/config.json="+local)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "jq\n", res.stdout)
	e, err := b.store.ResolveEnvironment(context.Background(), "alice", "jq")
	require.NoError(t, err)
	require.Equal(t, jobs.Recipe{Name: "jq", Lang: "javascript", Packages: []string{"jq"}, Libraries: []string{"js-md5@0.8.3"},
		Files: []jobs.RecipeFile{{Path: "/opt/lab/config.json", Content: `{"a": 1}`}}}, e.Recipe)
	require.Equal(t, "alice", e.Tenant)

	res = b.cli(t, "", "env", "create", "--tenant", "alice", "--name", "jq", "--lang", "javascript",
		"--package", "jq", "--library", "js-md5@0.8.3", "--file", "/opt/lab/config.json="+local)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "exists with this recipe")
	res = b.cli(t, "", "env", "create", "--tenant", "alice", "--name", "jq", "--lang", "javascript")
	require.Equal(t, exitCLI, res.code)
	require.Contains(t, res.stderr, "another recipe")
	res = b.cli(t, "", "env", "create", "--name", "bad", "--lang", "javascript", "--file", "/work/x="+local)
	require.Equal(t, exitRejected, res.code)
	require.Contains(t, res.stderr, "files[0]")
	res = b.cli(t, "", "env", "create", "--name", "bad", "--lang", "javascript", "--file", "/opt/x")
	require.Equal(t, exitCLI, res.code)
	require.Contains(t, res.stderr, "PATH=LOCAL")
	res = b.cli(t, "", "env", "create", "--name", "py", "--lang", "python", "--shared")
	require.Equal(t, 0, res.code, res.stderr)

	// A build recorded by a worker.
	require.NoError(t, b.store.PutEnvBuild(context.Background(), store.EnvBuild{Hash: e.Recipe.Hash("sha256:base"),
		Recipe: e.Recipe.Key(), Image: "sha256:img", TookMS: 42, Built: time.Now().UTC()}))
	res = b.cli(t, "", "env", "list")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^jq\s+alice\s+javascript\s+built\s+jq\s+js-md5@0.8.3\s+1\s`, res.stdout)
	require.Regexp(t, `(?m)^py\s+\(shared\)\s+python\s+not_built\s`, res.stdout)
	res = b.cli(t, "", "env", "show", "--tenant", "alice", "jq")
	require.Equal(t, 0, res.code, res.stderr)
	v := decodeJSON[service.EnvironmentView](t, res.stdout)
	require.Equal(t, service.EnvBuilt, v.State)
	require.Equal(t, "sha256:img", v.Build.Image)
	res = b.cli(t, "", "env", "show", "--tenant", "bob", "jq")
	require.Equal(t, exitCLI, res.code, "bob has no jq")
	res = b.cli(t, "", "env", "show", "--tenant", "bob", "py")
	require.Equal(t, 0, res.code, "the shared one is bob's too: %s", res.stderr)

	// run --environment --allow.
	res = b.cli(t, "1", "run", "--run-allow-hosts", "example.com:443,*.example.org:80", "--lang", "js", "--tenant", "alice", "--environment", "jq", "--allow", "example.com:443", "--allow", "*.example.org:80", "-")
	require.Equal(t, 0, res.code, res.stderr)
	id := res.stdout[:len(res.stdout)-1]
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	ti, err := insp.GetTaskInfo(store.AsynqQueue(b.prefix, jobs.QueueDefault), id)
	require.NoError(t, err)
	j, err := store.DecodeTask(asynq.NewTask(ti.Type, ti.Payload))
	require.NoError(t, err)
	require.Equal(t, "jq", j.Environment)
	require.ElementsMatch(t, []string{"example.com:443", "*.example.org:80"}, j.Network.Allow)

	res = b.cli(t, "", "env", "rm", "--tenant", "alice", "jq")
	require.Equal(t, 0, res.code, res.stderr)
	res = b.cli(t, "", "env", "rm", "--tenant", "alice", "jq")
	require.Equal(t, exitCLI, res.code)
	require.Contains(t, res.stderr, "no environment jq")
	res = b.cli(t, "", "env", "rm", "py")
	require.Equal(t, exitCLI, res.code, "the shared one needs --shared")
	res = b.cli(t, "", "env", "rm", "--shared", "py")
	require.Equal(t, 0, res.code, res.stderr)
}
