package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMatchGlob(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.csv", "a.csv", true},
		{"*.csv", "out/a.csv", false},
		{"**/*.csv", "a.csv", true},
		{"**/*.csv", "out/deep/a.csv", true},
		{"out/**", "out/a", true},
		{"out/**", "out/x/y/z.bin", true},
		{"out/**", "other/a", false},
		{"out/**", "out", true},
		{"*", "main.py", true},
		{"*", "dir/main.py", false},
		{"data/?.txt", "data/a.txt", true},
		{"data/?.txt", "data/ab.txt", false},
		{"[", "[", false},
	} {
		require.Equal(t, tt.want, MatchGlob(tt.pattern, tt.name), "%s ~ %s", tt.pattern, tt.name)
	}
}

func TestMatchGlobIsLinear(t *testing.T) {
	t.Parallel()
	// Backtracking over "**" would take 2^30 steps here.
	pat := strings.Repeat("**/", 30) + "x"
	name := strings.Repeat("a/", 60) + "y"
	start := time.Now()
	require.False(t, MatchGlob(pat, name))
	require.True(t, MatchGlob(pat, strings.Repeat("a/", 60)+"x"))
	require.Less(t, time.Since(start), time.Second)
}

func TestCouldMatchBelow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pattern, dir string
		want         bool
	}{
		{"*.csv", ".", true},
		{"*.csv", "out", false},
		{"out/*.csv", "out", true},
		{"out/*.csv", "other", false},
		{"out/*.csv", "out/deeper", false},
		{"**/*.csv", "a/b/c", true},
		{"out/**", "out/x/y", true},
		{"a/*/c/*.txt", "a/b", true},
		{"a/*/c/*.txt", "a/b/d", false},
	} {
		require.Equal(t, tt.want, couldMatchBelow(tt.pattern, tt.dir), "%s under %s", tt.pattern, tt.dir)
	}
}
