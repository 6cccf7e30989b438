package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/langs"
)

type langLine struct {
	Name, Version, Libraries, Image, Error string
	Aliases                                []string
}

// TestEnqueueLangs: a worker reads every toolchain's version from its
// image, in a sandbox container, and publishes it in Redis; `enqueue langs`
// lists them without a container engine, and says which are missing.
//
// Not parallel: it runs before the parallel tests start their workers.
func TestEnqueueLangs(t *testing.T) {
	e := newEnv(t)
	langsCmd := func(args ...string) ([]langLine, error) {
		t.Helper()
		cmd := exec.Command(bins.enqueue, append([]string{"--prefix", e.prefix, "--redis", redisAddr(), "langs", "--json"}, args...)...)
		out, err := cmd.Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Logf("enqueue langs: %v; stderr:\n%s", err, exit.Stderr)
		}
		// The list is printed on failure too, with each language's reason.
		var got []langLine
		require.NoError(t, json.Unmarshal(out, &got), string(out))
		require.Len(t, got, len(langs.All()))
		return got, err
	}

	// Before any worker published: every version is missing, exit 1.
	got, err := langsCmd()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee) && ee.ExitCode() == 1, "no version known is exit 1: %v", err)
	require.Contains(t, string(ee.Stderr), "no version known for bash, c, cpp")
	require.Contains(t, got[0].Error, "no worker has published")

	w := e.startWorker("--publish-versions=true", "--warm", "")
	w.waitLog("toolchain versions published", 5*time.Minute)
	got, err = langsCmd()
	require.NoError(t, err)
	want := map[string]string{
		"python": "Python 3.", "javascript": "Node.js v18.", "typescript": "TypeScript 4.", "java": "openjdk 17.",
		"cpp": "g++ (Debian 12.", "c": "gcc (Debian 12.", "go": "go version go1.", "rust": "rustc 1.",
		"ruby": "ruby 3.", "r": "Rscript (R) version 4.", "bash": "GNU bash, version 5.",
	}
	for _, l := range got {
		require.Empty(t, l.Error, l.Name)
		prefix, ok := want[l.Name]
		require.True(t, ok, "%s has no expected version in this test's table", l.Name)
		require.True(t, strings.HasPrefix(l.Version, prefix), "%s: version %q, want prefix %q", l.Name, l.Version, prefix)
		require.Equal(t, "sandq/"+l.Name+":latest", l.Image)
	}
	require.Len(t, want, len(got), "the table names languages sandq does not have")
	require.Equal(t, []string{"py", "python3"}, got[6].Aliases)
	require.Equal(t, "pip", got[6].Libraries)
	require.Empty(t, e.containers(w.owner), "the version containers are removed after use")

	// A worker without the images publishes why, in its own namespace.
	e2 := newEnv(t)
	w2 := e2.startWorker("--publish-versions=true", "--warm", "", "--image-prefix", "sandq-missing/")
	w2.waitLog("toolchain versions published", time.Minute)
	cmd := exec.Command(bins.enqueue, "--prefix", e2.prefix, "--redis", redisAddr(), "langs", "--json")
	out, err := cmd.Output()
	require.True(t, errors.As(err, &ee) && ee.ExitCode() == 1, "a missing image is exit 1: %v", err)
	require.Contains(t, string(ee.Stderr), "no version known for bash, c, cpp")
	require.NoError(t, json.Unmarshal(out, &got))
	require.Contains(t, got[0].Error, "sandq-missing/bash:latest")
}
