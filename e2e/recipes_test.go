package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// TestEnvironmentRecipe: a recipe (javascript + the Debian package jq +
// the npm library js-md5 + a file) is built once by the worker that runs
// the first job naming it (Debian's mirror reached through the build
// egress), its jobs use all three with no network, a second job finds the
// image (no build: measured), a tenant's own recipe shadows a shared one
// of the same name, another tenant cannot see a tenant's recipe, and a
// recipe whose package does not exist ends its job failed with apt-get's
// output; deleted, the environments' images are removed by the worker's
// collector (which spared them while they were named).
func TestEnvironmentRecipe(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st, err := store.New(e.rdb, store.Config{Prefix: e.prefix})
	require.NoError(t, err)
	// The collector runs every 2 s: it must spare the images environments
	// still build, and remove the others.
	e.startWorker("--concurrency", "1", "--warm", "", "--libs-gc-interval", "2s")

	// A file's content unique to this run: the hash (and image) are new,
	// so the first job really builds.
	nonce := jobs.NewID()
	recipe := jobs.Recipe{Name: "jqmd5", Lang: "javascript", Packages: []string{"jq"}, Libraries: []string{"js-md5@0.8.3"},
		Files: []jobs.RecipeFile{{Path: "/opt/sandq-test/nonce.txt", Content: nonce}}}
	require.NoError(t, langs.Policy(jobs.Policy{}).ValidateRecipe(recipe))
	require.NoError(t, st.PutEnvironment(ctx, store.Environment{Recipe: recipe, Tenant: "alice", Created: time.Now()}))
	baseID := imageID(t, "sandq/javascript:latest")
	hash := recipe.Hash(baseID)
	tag := jobs.EnvImageRepo(hash) + ":latest"
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })

	code := `
const { execFileSync } = require('child_process');
const md5 = require('js-md5');
const fs = require('fs');
console.log(execFileSync('jq', ['-n', '{"a": 1} | .a + 1']).toString().trim());
console.log(md5('hello'));
console.log(fs.readFileSync('/opt/sandq-test/nonce.txt', 'utf8'));
require('dns').lookup('deb.debian.org', (err) => console.log(err ? 'no network' : 'network'));
`
	job := jobs.Job{Lang: "javascript", Code: code, Environment: "jqmd5", Tenant: "alice"}
	want := "2\n5d41402abc4b2a76b9719d911017c592\n" + nonce + "\nno network\n"

	start := time.Now()
	r := e.wait(e.enqueue(job), 10*time.Minute)
	first := time.Since(start)
	require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
	require.Equal(t, want, r.Stdout)
	require.NotNil(t, r.Provenance, "a job in an environment records it")
	require.Equal(t, "jqmd5", r.Provenance.Environment)
	require.Equal(t, hash, r.Provenance.Recipe, "the recipe the image was built from")
	require.Equal(t, imageID(t, tag), r.Provenance.Image)
	b, ok, err := st.EnvBuildOf(ctx, hash)
	require.NoError(t, err)
	require.True(t, ok, "the build is recorded")
	require.Equal(t, imageID(t, tag), b.Image)
	require.Contains(t, b.Log, "jq")
	out, err := exec.Command("docker", "image", "inspect", "-f", `{{index .Config.Labels "sandq.env.hash"}} {{index .Config.Labels "sandq.env.name"}} {{index .Config.Labels "sandq.env.tenant"}}`, tag).Output()
	require.NoError(t, err)
	require.Equal(t, hash+" jqmd5 alice", strings.TrimSpace(string(out)))
	t.Logf("first job (build included): %s; build %d ms", first, b.TookMS)

	start = time.Now()
	r = e.wait(e.enqueue(job), 2*time.Minute)
	second := time.Since(start)
	require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
	require.Equal(t, want, r.Stdout)
	t.Logf("second job (image found): %s", second)
	require.Less(t, second, first/3, "the second job builds nothing")
	b2, _, err := st.EnvBuildOf(ctx, hash)
	require.NoError(t, err)
	require.Equal(t, b.Built, b2.Built, "not built again")

	// Scope: bob sees no "jqmd5"; a shared one of that name is his, and
	// alice keeps her own.
	r = e.wait(e.enqueue(jobs.Job{Lang: "javascript", Code: code, Environment: "jqmd5", Tenant: "bob"}), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
	require.Contains(t, r.Reason, "no environment of that name")
	shared := jobs.Recipe{Name: "jqmd5", Lang: "javascript", Shared: true}
	require.NoError(t, st.PutEnvironment(ctx, store.Environment{Recipe: shared, Created: time.Now()}))
	r = e.wait(e.enqueue(jobs.Job{Lang: "javascript", Code: `console.log(require('fs').existsSync('/opt/sandq-test/nonce.txt'))`, Environment: "jqmd5", Tenant: "bob"}), 5*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
	require.Equal(t, "false\n", r.Stdout, "bob runs the shared recipe")
	r = e.wait(e.enqueue(job), 2*time.Minute)
	require.Equal(t, want, r.Stdout, "alice keeps her own")
	sharedTag := jobs.EnvImageRepo(shared.Hash(baseID)) + ":latest"
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", sharedTag).Run() })

	// A language the recipe is not built on.
	r = e.wait(e.enqueue(jobs.Job{Lang: "python", Code: "print(1)", Environment: "jqmd5", Tenant: "alice"}), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
	require.Contains(t, r.Reason, "runs javascript jobs")

	// A failed build: failed, with apt-get's output.
	bad := jobs.Recipe{Name: "bad", Lang: "javascript", Packages: []string{"sandq-no-such-package-" + strings.ToLower(nonce[:6])}}
	require.NoError(t, st.PutEnvironment(ctx, store.Environment{Recipe: bad, Tenant: "alice", Created: time.Now()}))
	r = e.wait(e.enqueue(jobs.Job{Lang: "javascript", Code: "1", Environment: "bad", Tenant: "alice"}), 5*time.Minute)
	require.Equal(t, jobs.StatusFailed, r.Status, r.Reason)
	require.Contains(t, r.Reason, "building its image failed")
	require.Contains(t, r.Reason, "Unable to locate package")
	fb, ok, err := st.EnvBuildOf(ctx, bad.Hash(baseID))
	require.NoError(t, err)
	require.True(t, ok)
	require.Contains(t, fb.Log, "Unable to locate package")
	require.Empty(t, fb.Image)

	// env rm, then the collector removes the images.
	require.Equal(t, imageID(t, tag), b.Image, "still there: its environment exists")
	require.NoError(t, st.DeleteEnvironment(ctx, "alice", "jqmd5", false))
	require.NoError(t, st.DeleteEnvironment(ctx, "", "jqmd5", true))
	require.ErrorIs(t, st.DeleteEnvironment(ctx, "alice", "jqmd5", false), store.ErrNoEnvironment)
	require.Eventually(t, func() bool {
		return exec.Command("docker", "image", "inspect", tag).Run() != nil &&
			exec.Command("docker", "image", "inspect", sharedTag).Run() != nil
	}, time.Minute, 500*time.Millisecond, "the collector removes the images of deleted environments")
	_, ok, err = st.EnvBuildOf(ctx, hash)
	require.NoError(t, err)
	require.False(t, ok, "the build record is forgotten with its image")
	r = e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
}
