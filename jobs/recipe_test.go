package jobs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// TestRecipe: a recipe's hash covers what decides the image (and not its
// order, name or scope), and validation refuses what could not build or
// would reach sandq's own paths.
func TestRecipe(t *testing.T) {
	r := jobs.Recipe{Name: "a", Lang: "javascript", Packages: []string{"jq", "curl"}, Libraries: []string{"lodash"},
		Files: []jobs.RecipeFile{{Path: "/etc/x", Content: "1"}, {Path: "/opt/y", Content: "2"}}}
	same := r
	same.Name, same.Shared = "b", true
	same.Packages = []string{"curl", "jq", "jq"}
	same.Files = []jobs.RecipeFile{r.Files[1], r.Files[0]}
	require.Equal(t, r.Hash("sha256:1"), same.Hash("sha256:1"))
	require.NotEqual(t, r.Hash("sha256:1"), r.Hash("sha256:2"), "the base image is in the hash")
	other := r
	other.Files = []jobs.RecipeFile{{Path: "/etc/x", Content: "2"}}
	require.NotEqual(t, r.Hash("sha256:1"), other.Hash("sha256:1"))
	require.Len(t, r.Hash("x"), 64)

	p := langs.Policy(jobs.Policy{})
	require.NoError(t, p.ValidateRecipe(r))
	for _, tc := range []struct {
		mod  func(*jobs.Recipe)
		want string
	}{
		{func(r *jobs.Recipe) { r.Name = "Bad" }, "not an environment name"},
		{func(r *jobs.Recipe) { r.Name = "image:x" }, "not an environment name"},
		{func(r *jobs.Recipe) { r.Lang = "cobol" }, "unknown language"},
		{func(r *jobs.Recipe) { r.Packages = []string{"-o=x"} }, "not a Debian package"},
		{func(r *jobs.Recipe) { r.Packages = []string{"jq;rm"} }, "not a Debian package"},
		{func(r *jobs.Recipe) { r.Libraries = []string{"--registry=x"} }, "options are not accepted"},
		{func(r *jobs.Recipe) { r.Lang, r.Libraries = "bash", []string{"x"} }, "no package manager"},
		{func(r *jobs.Recipe) { r.Files = []jobs.RecipeFile{{Path: "rel", Content: ""}} }, "absolute"},
		{func(r *jobs.Recipe) { r.Files = []jobs.RecipeFile{{Path: "/a/../b", Content: ""}} }, "absolute and clean"},
		{func(r *jobs.Recipe) { r.Files = []jobs.RecipeFile{{Path: "/sandq/agent", Content: ""}} }, "sandq owns"},
		{func(r *jobs.Recipe) { r.Files = []jobs.RecipeFile{{Path: "/work", Content: ""}} }, "sandq owns"},
		{func(r *jobs.Recipe) {
			r.Files = []jobs.RecipeFile{{Path: "/x", Content: ""}, {Path: "/x", Content: ""}}
		}, "twice"},
	} {
		bad := r
		tc.mod(&bad)
		require.ErrorContains(t, p.ValidateRecipe(bad), tc.want)
	}
}
