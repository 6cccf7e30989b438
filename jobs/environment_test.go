package jobs_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// TestValidateEnvironment: the syntax of "image:REF" is checked wherever a
// job is validated; the operator's --image-allow only where the policy
// knows it (CheckImages), and there none allows nothing. Named (recipe)
// environments are checked for their name's syntax; libraries in an
// environment are refused.
func TestValidateEnvironment(t *testing.T) {
	client := langs.Policy(jobs.Policy{})
	none := langs.Policy(jobs.Policy{CheckImages: true})
	some := langs.Policy(jobs.Policy{CheckImages: true, ImageAllow: []string{"sandq-test/*", "python:3.1?"}})
	digest := "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		policy jobs.Policy
		env    string
		libs   []string
		want   string // "" valid, else a substring of the error
	}{
		{client, "", nil, ""},
		{client, "image:anything/at:all", nil, ""},
		{client, "image:python", nil, ""},
		{client, "image:", nil, "names no image"},
		{client, "image:Upper/Case", nil, "not an image reference"},
		{client, "image:" + digest, nil, "not an image reference"}, // a bare image ID
		{client, "image:" + digest[7:], nil, "not an image reference"},
		{client, "image:a b", nil, "not an image reference"},
		{client, "myenv", nil, ""}, // a recipe's: the worker resolves it
		{client, "my-env.2", nil, ""},
		{client, "MyEnv", nil, "not an environment name"},
		{client, "my/env", nil, "not an environment name"},
		{client, "myenv", []string{"requests"}, "libraries: are not installed in an environment"},
		{client, "image:python:3.12", []string{"requests"}, "libraries: are not installed in an environment"},
		{none, "image:python:3.12", nil, "allows no image"},
		{some, "image:python:3.12", nil, ""},
		{some, "image:docker.io/library/python:3.12", nil, ""},
		{some, "image:python:3.9", nil, "image python:3.9 is not allowed"},
		{some, "image:python", nil, "image python:latest is not allowed"},
		{some, "image:sandq-test/x", nil, ""},
		{some, "image:sandq-test/x@" + digest, nil, ""}, // the worker checks it is the image's own
		{some, "image:sandq/python:latest", nil, "not allowed"},
		{some, "image:sandq-test/a/b:1", nil, "not allowed"}, // * stops at /
	} {
		j := jobs.Job{Lang: "python", Code: "print(1)", Environment: tc.env, Libraries: tc.libs}
		err := tc.policy.Validate(&j)
		if tc.want == "" {
			require.NoError(t, err, tc.env)
			continue
		}
		var ve *jobs.ValidationError
		require.True(t, errors.As(err, &ve), "%s: %v", tc.env, err)
		require.ErrorContains(t, err, tc.want, tc.env)
		s := jobs.SessionSpec{Lang: "python", Environment: tc.env, Libraries: tc.libs}
		require.Error(t, tc.policy.ValidateSession(&s), "session %s", tc.env)
	}
	require.Error(t, langs.Policy(jobs.Policy{ImageAllow: []string{"["}}).WithDefaults().Check())
}

func TestImageRef(t *testing.T) {
	for in, want := range map[string]string{
		"image:python":                        "python:latest",
		"image:docker.io/library/python:3.12": "python:3.12",
		"image:sandq-test/x:1":                "sandq-test/x:1",
		"image:localhost:5000/x":              "localhost:5000/x:latest",
	} {
		got, ok := jobs.ImageRef(in)
		require.True(t, ok)
		require.Equal(t, want, got, in)
	}
	_, ok := jobs.ImageRef("name")
	require.False(t, ok)
}
