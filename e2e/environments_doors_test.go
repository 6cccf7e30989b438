package e2e

import (
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/api"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// TestEnvironmentDoors: environments through the HTTP API, built and run
// by a real worker. A recipe (javascript + the Debian package jq + a file)
// made with POST /v1/environments is not built until a job names it; a job
// through the API then builds and runs in it (jq and the file there), and
// the environment shows built with the image the engine has; a recipe
// whose package does not exist shows failed with the tail of apt-get's
// output; deleted, a job naming it is refused at the door.
func TestEnvironmentDoors(t *testing.T) {
	e := newEnv(t)
	e.startWorker("--concurrency", "1", "--warm", "")
	a := e.startAPI()
	key := e.apiKey("alice")
	other := e.apiKey("bob")

	// A nonce in a file: the recipe's hash (and image) are new, so the
	// first job really builds.
	nonce := jobs.NewID()
	recipe := jobs.Recipe{Name: "jqdoor", Lang: "javascript", Packages: []string{"jq"},
		Files: []jobs.RecipeFile{{Path: "/opt/sandq-test/nonce.txt", Content: nonce}}}
	var v service.EnvironmentView
	resp := call(t, "POST", a.url+"/v1/environments", key, recipe, &v)
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, service.EnvNotBuilt, v.State)
	tag := jobs.EnvImageRepo(recipe.Hash(imageID(t, "sandq/javascript:latest"))) + ":latest"
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })

	code := `
const { execFileSync } = require('child_process');
console.log(execFileSync('jq', ['-n', '{"a": 1} | .a + 1']).toString().trim());
console.log(require('fs').readFileSync('/opt/sandq-test/nonce.txt', 'utf8'));
`
	job := runViaAPI(t, a.url, key, map[string]any{"lang": "javascript", "environment": "jqdoor", "code": code})
	require.Equal(t, jobs.StatusSucceeded, job.Status, "%s: %s", job.Reason, job.Stderr)
	require.Equal(t, "2\n"+nonce+"\n", job.Stdout)

	var list api.EnvironmentList
	resp = call(t, "GET", a.url+"/v1/environments", key, nil, &list)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, list.Environments, 1)
	v = list.Environments[0]
	require.Equal(t, service.EnvBuilt, v.State)
	require.NotNil(t, v.Build)
	require.Equal(t, imageID(t, tag), v.Build.Image, "the image the engine has")
	require.Positive(t, v.Build.TookMS)
	t.Logf("build through the API's job: %d ms", v.Build.TookMS)
	resp = call(t, "GET", a.url+"/v1/environments/jqdoor", other, nil, nil)
	require.Equal(t, 404, resp.StatusCode, "bob sees none of alice's")

	// A failed build: failed, with apt-get's output.
	bad := jobs.Recipe{Name: "baddoor", Lang: "javascript", Packages: []string{"sandq-no-such-package-" + strings.ToLower(nonce[:6])}}
	resp = call(t, "POST", a.url+"/v1/environments", key, bad, nil)
	require.Equal(t, 201, resp.StatusCode)
	job = runViaAPI(t, a.url, key, map[string]any{"lang": "javascript", "environment": "baddoor", "code": "1"})
	require.Equal(t, jobs.StatusFailed, job.Status, job.Reason)
	resp = call(t, "GET", a.url+"/v1/environments/baddoor", key, nil, &v)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, service.EnvFailed, v.State)
	require.Contains(t, v.Build.LogTail, "Unable to locate package")
	require.NotEmpty(t, v.Build.Error)

	// Deleted: refused at the door.
	for _, name := range []string{"jqdoor", "baddoor"} {
		resp = call(t, "DELETE", a.url+"/v1/environments/"+url.PathEscape(name), key, nil, nil)
		require.Equal(t, 204, resp.StatusCode)
	}
	var p struct {
		Detail string `json:"detail"`
		Errors []struct {
			Location, Message string
		} `json:"errors"`
	}
	resp = call(t, "POST", a.url+"/v1/jobs", key, map[string]any{"lang": "javascript", "environment": "jqdoor", "code": code}, &p)
	require.Equal(t, 422, resp.StatusCode)
	require.NotEmpty(t, p.Errors)
	require.Equal(t, "body.environment", p.Errors[0].Location)
	require.Contains(t, p.Errors[0].Message, "no environment jqdoor")
}

// runViaAPI submits a job through the API and waits for its end.
func runViaAPI(t *testing.T, base, key string, job map[string]any) api.JobView {
	t.Helper()
	var v api.JobView
	resp := call(t, "POST", base+"/v1/jobs?wait=60s", key, job, &v)
	require.Contains(t, []int{200, 202}, resp.StatusCode)
	deadline := time.Now().Add(5 * time.Minute)
	for !v.Status.Final() && time.Now().Before(deadline) {
		resp = call(t, "GET", base+"/v1/jobs/"+url.PathEscape(v.ID)+"?wait=60s", key, nil, &v)
		require.Contains(t, []int{200, 202}, resp.StatusCode)
	}
	require.True(t, v.Status.Final(), "job %s is %s", v.ID, v.Status)
	return v
}
