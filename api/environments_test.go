package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// TestEnvironmentsAPI: /v1/environments over real Redis: a recipe is
// validated (422 naming the field), made once (201, then 200 for the same
// recipe, 409 for another), listed and read per tenant (another tenant
// sees nothing of it), shown with the build the workers recorded (not
// built, built, failed with its log's tail), shared only by a key with
// environments:shared; a job naming an environment it cannot use is 422
// at the door (none, another language, deleted), and deleting is 204 then
// 404.
func TestEnvironmentsAPI(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	ctx := context.Background()
	alice := b.key("alice", service.KeyOptions{})
	bob := b.key("bob", service.KeyOptions{})
	reader := b.key("alice", service.KeyOptions{Scopes: []string{service.ScopeRead}})
	op := b.key("ops", service.KeyOptions{Scopes: []string{service.ScopeRead, service.ScopeWrite, service.ScopeSharedEnvironments}})

	// Validation: the field is named.
	resp, body := b.do("POST", "/v1/environments", alice, map[string]any{"name": "Bad Name", "lang": "javascript"})
	p := requireProblem(t, resp, body, 422)
	require.Contains(t, string(body), "body.name", p)
	resp, body = b.do("POST", "/v1/environments", alice, map[string]any{"name": "x", "lang": "javascript", "packages": []string{"jq; rm"}})
	requireProblem(t, resp, body, 422)
	require.Contains(t, string(body), "body.packages[0]")
	resp, body = b.do("POST", "/v1/environments", alice, map[string]any{"name": "x", "lang": "javascript",
		"files": []map[string]string{{"path": "/work/x", "content": "1"}}})
	requireProblem(t, resp, body, 422)
	require.Contains(t, string(body), "body.files[0]")
	resp, body = b.do("POST", "/v1/environments", reader, map[string]any{"name": "x", "lang": "javascript"})
	requireProblem(t, resp, body, 403)

	recipe := jobs.Recipe{Name: "jq", Lang: "javascript", Packages: []string{"jq"},
		Files: []jobs.RecipeFile{{Path: "/opt/lab/a.txt", Content: "a"}}}
	resp, body = b.do("POST", "/v1/environments", alice, recipe)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	require.Equal(t, "/v1/environments/jq", resp.Header.Get("Location"))
	v := decode[service.EnvironmentView](t, body)
	require.Equal(t, service.EnvNotBuilt, v.State)
	require.Nil(t, v.Build)
	require.Empty(t, v.Tenant, "a tenant is not shown its own name")
	resp, body = b.do("POST", "/v1/environments", alice, recipe)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the same recipe again: %s", body)
	other := recipe
	other.Packages = []string{"curl"}
	resp, body = b.do("POST", "/v1/environments", alice, other)
	requireProblem(t, resp, body, 409)
	// bob's "jq" is his own.
	resp, body = b.do("POST", "/v1/environments", bob, other)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))

	// Listing and reading: each tenant its own.
	resp, body = b.do("GET", "/v1/environments", alice, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	list := decode[EnvironmentList](t, body).Environments
	require.Len(t, list, 1)
	require.Equal(t, []string{"jq"}, list[0].Packages)
	resp, body = b.do("GET", "/v1/environments/jq", bob, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, []string{"curl"}, decode[service.EnvironmentView](t, body).Packages)
	resp, body = b.do("GET", "/v1/environments/nope", alice, nil)
	requireProblem(t, resp, body, 404)

	// The builds the workers record, found by the recipe's key whatever
	// the base image's ID.
	st := b.ns.Store
	built := time.Now().UTC().Truncate(time.Second)
	require.NoError(t, st.PutEnvBuild(ctx, store.EnvBuild{Hash: recipe.Hash("sha256:base1"), Recipe: recipe.Key(),
		Image: "sha256:img1", TookMS: 1234, Built: built, LastUsed: built}))
	resp, body = b.do("GET", "/v1/environments/jq", alice, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	v = decode[service.EnvironmentView](t, body)
	require.Equal(t, service.EnvBuilt, v.State)
	require.Equal(t, "sha256:img1", v.Build.Image)
	require.EqualValues(t, 1234, v.Build.TookMS)
	require.True(t, v.Build.Built.Equal(built))
	require.Empty(t, v.Build.LogTail, "no log for a build that succeeded")
	// bob's recipe (another key) has no build.
	_, body = b.do("GET", "/v1/environments/jq", bob, nil)
	require.Equal(t, service.EnvNotBuilt, decode[service.EnvironmentView](t, body).State, string(body))
	// A newer build on another engine failed: it is what is shown, with
	// the tail of its log.
	log := strings.Repeat("x", 10<<10) + "E: Unable to locate package jq"
	require.NoError(t, st.PutEnvBuild(ctx, store.EnvBuild{Hash: recipe.Hash("sha256:base2"), Recipe: recipe.Key(),
		Error: "the build script exited with status 100", Log: log, Built: built.Add(time.Minute)}))
	_, body = b.do("GET", "/v1/environments", alice, nil)
	v = decode[EnvironmentList](t, body).Environments[0]
	require.Equal(t, service.EnvFailed, v.State, string(body))
	require.Equal(t, "the build script exited with status 100", v.Build.Error)
	require.True(t, strings.HasSuffix(v.Build.LogTail, "Unable to locate package jq"))
	require.Less(t, len(v.Build.LogTail), 5<<10)

	// Shared: only with environments:shared; every tenant sees it after
	// its own.
	shared := jobs.Recipe{Name: "py", Lang: "python", Shared: true}
	resp, body = b.do("POST", "/v1/environments", alice, shared)
	requireProblem(t, resp, body, 403)
	require.Contains(t, string(body), service.ScopeSharedEnvironments)
	resp, body = b.do("POST", "/v1/environments", op, shared)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	require.Equal(t, "/v1/environments/py?shared=true", resp.Header.Get("Location"))
	_, body = b.do("GET", "/v1/environments", bob, nil)
	list = decode[EnvironmentList](t, body).Environments
	require.Len(t, list, 2, string(body))
	require.Equal(t, "py", list[1].Name)
	require.True(t, list[1].Shared)
	resp, body = b.do("GET", "/v1/environments/py?shared=true", bob, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	resp, body = b.do("DELETE", "/v1/environments/py?shared=true", alice, nil)
	requireProblem(t, resp, body, 403)
	resp, body = b.do("DELETE", "/v1/environments/py", alice, nil)
	requireProblem(t, resp, body, 404)

	// Jobs: a name resolves at the door.
	resp, body = b.do("POST", "/v1/jobs", alice, map[string]any{"lang": "javascript", "code": "1", "environment": "jq"})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
	resp, body = b.do("POST", "/v1/jobs", alice, map[string]any{"lang": "python", "code": "1", "environment": "py"})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "the shared one: %s", body)
	resp, body = b.do("POST", "/v1/jobs", alice, map[string]any{"lang": "python", "code": "1", "environment": "jq"})
	requireProblem(t, resp, body, 422)
	require.Contains(t, string(body), "runs javascript jobs")
	resp, body = b.do("POST", "/v1/jobs", alice, map[string]any{"lang": "javascript", "code": "1", "environment": "nope"})
	requireProblem(t, resp, body, 422)
	require.Contains(t, string(body), "body.environment")

	// Delete: 204, then 404, and jobs naming it are refused.
	resp, body = b.do("DELETE", "/v1/environments/jq", alice, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))
	resp, body = b.do("DELETE", "/v1/environments/jq", alice, nil)
	requireProblem(t, resp, body, 404)
	resp, body = b.do("POST", "/v1/jobs", alice, map[string]any{"lang": "javascript", "code": "1", "environment": "jq"})
	requireProblem(t, resp, body, 422)
	resp, body = b.do("GET", "/v1/environments/jq", bob, nil)
	require.Equal(t, 200, resp.StatusCode, "bob's is his own: %s", body)
	resp, body = b.do("DELETE", "/v1/environments/py?shared=true", op, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))
}

// TestMCPEnvironments: the env tools over /mcp are the service's rules:
// env_create (invalid: an error result naming the field; shared without
// the scope: refused), env_list and env_show per tenant, run_code naming
// an environment (its own: queued; another tenant's: refused at the
// door), env_delete.
func TestMCPEnvironments(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	ctx := context.Background()
	a := b.mcpClient(b.key("alice", service.KeyOptions{}), nil)
	bob := b.mcpClient(b.key("bob", service.KeyOptions{}), nil)
	call := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		t.Logf("%s → error %v: %s", name, res.IsError, text(res))
		return res
	}

	res := call(a, "env_create", map[string]any{"name": "Bad", "lang": "javascript"})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "name")
	res = call(a, "env_create", map[string]any{"name": "jq", "lang": "javascript", "packages": []string{"jq"}, "shared": true})
	require.True(t, res.IsError)
	require.Contains(t, text(res), service.ScopeSharedEnvironments)
	res = call(a, "env_create", map[string]any{"name": "jq", "lang": "javascript", "packages": []string{"jq"},
		"files": []map[string]string{{"path": "/opt/x.txt", "content": "x"}}})
	require.False(t, res.IsError)
	require.Contains(t, text(res), "made")
	res = call(a, "env_create", map[string]any{"name": "jq", "lang": "javascript", "packages": []string{"jq"},
		"files": []map[string]string{{"path": "/opt/x.txt", "content": "x"}}})
	require.False(t, res.IsError)
	require.Contains(t, text(res), "exists already")

	res = call(a, "env_list", nil)
	require.False(t, res.IsError)
	list := decode[struct {
		Environments []service.EnvironmentView `json:"environments"`
	}](t, mustJSON(t, res.StructuredContent))
	require.Len(t, list.Environments, 1)
	require.Equal(t, service.EnvNotBuilt, list.Environments[0].State)
	res = call(a, "env_show", map[string]any{"name": "jq"})
	require.False(t, res.IsError)
	require.Equal(t, []string{"jq"}, decode[service.EnvironmentView](t, mustJSON(t, res.StructuredContent)).Packages)
	require.True(t, call(bob, "env_show", map[string]any{"name": "jq"}).IsError, "bob has none")

	res = call(bob, "run_code", map[string]any{"lang": "javascript", "code": "1", "environment": "jq", "wait_seconds": 1})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "no environment jq")
	res = call(a, "run_code", map[string]any{"lang": "javascript", "code": "1", "environment": "jq", "wait_seconds": 1})
	require.NotContains(t, text(res), "no environment", "queued: no worker runs it here")
	res = call(a, "run_code", map[string]any{"lang": "javascript", "code": "1", "network": []string{"example.com:443"}, "wait_seconds": 1})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "network", "no scope, no --run-allow-hosts")

	require.False(t, call(a, "env_delete", map[string]any{"name": "jq"}).IsError)
	require.True(t, call(a, "env_delete", map[string]any{"name": "jq"}).IsError)
}
