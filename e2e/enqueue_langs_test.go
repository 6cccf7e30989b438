package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/langs"
)

type langLine struct {
	Name, Version, Libraries, Image, Error string
	Aliases                                []string
}

// TestEnqueueLangs: `enqueue langs` reads every toolchain's version from
// its image, in a sandbox container, and says which images are missing.
//
// Not parallel: it runs before the parallel tests start their workers. In
// CI, once, it ran among them and a version could not be read (exit 2, the
// reason not kept); the reasons are now logged.
func TestEnqueueLangs(t *testing.T) {
	out, err := exec.Command(bins.enqueue, "langs", "--json").Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Logf("enqueue langs: %v; stderr:\n%s", err, exit.Stderr)
	}
	// The list is printed on failure too, with each language's reason.
	var got []langLine
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	require.Len(t, got, len(langs.All()))
	for _, l := range got {
		require.Empty(t, l.Error, l.Name)
	}
	require.NoError(t, err)
	want := map[string]string{
		"python": "Python 3.", "javascript": "Node.js v18.", "typescript": "TypeScript 4.", "java": "openjdk 17.",
		"cpp": "g++ (Debian 12.", "c": "gcc (Debian 12.", "go": "go version go1.", "rust": "rustc 1.",
		"ruby": "ruby 3.", "r": "Rscript (R) version 4.", "bash": "GNU bash, version 5.",
	}
	for _, l := range got {
		require.Empty(t, l.Error, l.Name)
		require.True(t, strings.HasPrefix(l.Version, want[l.Name]), "%s: version %q, want prefix %q", l.Name, l.Version, want[l.Name])
	}
	require.Equal(t, []string{"py", "python3"}, got[6].Aliases)
	require.Equal(t, "pip", got[6].Libraries)

	cmd := exec.Command(bins.enqueue, "langs", "--json", "--image-prefix", "sandq-missing/")
	out, err = cmd.Output()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "a missing image is an error: %v", err)
	require.Contains(t, string(ee.Stderr), "could not read the version of bash, c, cpp")
	require.NoError(t, json.Unmarshal(out, &got))
	require.Contains(t, got[0].Error, "sandq-missing/bash:latest")
}
