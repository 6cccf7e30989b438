package agent

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArtifactNames: every claimed name is distinct, valid UTF-8, outside
// ReservedDir, and neither a directory of another nor under another.
func TestArtifactNames(t *testing.T) {
	t.Parallel()
	var n ArtifactNames
	for _, name := range []string{"plots/plot-001.png", "a.csv", "out/deep/b.csv", "\ufffd.csv", ".sandqx", "sandq/stdout"} {
		require.NoError(t, n.Claim(name), name)
	}
	for name, why := range map[string]string{
		"\xff.csv":           "name is not valid UTF-8",
		"out/\xfe":           "name is not valid UTF-8",
		".sandq":             "reserved for sandq's own artifacts",
		".sandq/stdout":      "reserved for sandq's own artifacts",
		".sandq/x/y":         "reserved for sandq's own artifacts",
		"a.csv":              "collides with another artifact named a.csv",
		"\ufffd.csv":         "collides with another artifact named \ufffd.csv",
		"plots/plot-001.png": "collides with another artifact named plots/plot-001.png",
		"plots":              "collides with the directory of another artifact under plots/",
		"out/deep":           "collides with the directory of another artifact under out/deep/",
		"a.csv/x":            "collides with another artifact named a.csv (a file where this needs a directory)",
	} {
		require.ErrorContains(t, n.Claim(name), why, "%q", name)
	}
	require.NoError(t, n.Claim("out/other.csv"), "a sibling is no collision")
	require.Equal(t, `"\xff.csv"`, ShowName("\xff.csv"))
	require.Equal(t, "\ufffd.csv", ShowName("\ufffd.csv"))
}
