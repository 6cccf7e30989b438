package langs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/langs"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, l := range langs.All() {
		t.Run(l.Name, func(t *testing.T) {
			require.Equal(t, strings.ToLower(l.Name), l.Name)
			for _, n := range append([]string{l.Name}, l.Aliases...) {
				other, dup := seen[n]
				require.False(t, dup, "name %q of %s is taken by %s", n, l.Name, other)
				seen[n] = l.Name
				got, ok := langs.Lookup(strings.ToUpper(n))
				require.True(t, ok)
				require.Equal(t, l.Name, got.Name)
			}
			require.NotEmpty(t, l.Source)
			require.Equal(t, filepath.Base(l.Source), l.Source, "the source is in the work dir itself")
			require.NotEmpty(t, l.Run)
			require.NotEmpty(t, l.Version)
			require.FileExists(t, filepath.Join("dockerfiles", l.Name+".Dockerfile"))
			if len(l.Compile) > 0 {
				cc := strings.Join(l.Compile, " ")
				require.True(t, strings.Contains(cc, l.Source) || strings.HasSuffix(cc, " ."),
					"the compile step reads the source or the work dir: %s", cc)
			} else {
				require.Equal(t, l.Source, l.Run[len(l.Run)-1], "the run step reads the source")
			}
		})
	}
}

func TestEveryDockerfileIsRegistered(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("dockerfiles", "*.Dockerfile"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".Dockerfile")
		l, ok := langs.Lookup(name)
		require.True(t, ok, "%s has no registry entry", f)
		require.Equal(t, name, l.Name)
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, want := range []string{"ARG BASE=", "FROM ${BASE}", "--uid 1000", "HOME=/tmp", "mkdir -p /work /sandq", "WORKDIR /work"} {
			require.Contains(t, string(b), want, "%s follows python.Dockerfile's conventions", f)
		}
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, out, want string
	}{
		{"Empty", "", ""},
		{"Blank", " \n\t\n", ""},
		{"OneLine", "Python 3.11.2\n", "Python 3.11.2"},
		{"NoNewline", "v18.20.4", "v18.20.4"},
		{"FirstLineOnly", "openjdk 17.0.13 2024-10-15\nOpenJDK Runtime Environment (build 17.0.13+11-Debian-2deb12u1)\n", "openjdk 17.0.13 2024-10-15"},
		{"LeadingBlankLines", "\n\n  gcc (Debian 12.2.0-14) 12.2.0 \nCopyright (C) 2022\n", "gcc (Debian 12.2.0-14) 12.2.0"},
		{"CollapsedSpace", "R scripting front-end\tversion 4.2.2   (2022-10-31)\r\n", "R scripting front-end version 4.2.2 (2022-10-31)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, langs.ParseVersion([]byte(tt.out)))
		})
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	got := langs.Describe(map[string][]byte{
		"python": []byte("Python 3.11.2\n"),
		"go":     []byte("go version go1.23.5 linux/amd64\n"),
		"nosuch": []byte("ignored"),
	})
	require.Len(t, got, len(langs.All()))
	byName := map[string]langs.Info{}
	for i, in := range got {
		if i > 0 {
			require.Less(t, got[i-1].Name, in.Name, "sorted by name")
		}
		byName[in.Name] = in
	}
	want := map[string]langs.Info{
		"python": {Name: "python", Aliases: []string{"py", "python3"}, Libraries: "pip", Version: "Python 3.11.2"},
		"go":     {Name: "go", Aliases: []string{"golang"}, Libraries: "go", Version: "go version go1.23.5 linux/amd64"},
		"c":      {Name: "c", Version: ""},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, byName[name]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	// Describe hands out copies: sorting its aliases leaves the registry alone.
	got[0].Aliases = append(got[0].Aliases, "x")
	require.NotContains(t, langs.Describe(nil)[0].Aliases, "x")
}

// TestTypeScriptCompilerStartsAhead: the agent knows sandq-tsc's
// compile by its snapshot's path (agent.TSCSnapshot), and starts it ahead
// only when the language asks for a prestart.
func TestTypeScriptCompilerStartsAhead(t *testing.T) {
	ts, ok := langs.Lookup("typescript")
	require.True(t, ok)
	require.True(t, ts.Prestart)
	require.Equal(t, []string{"node", "--snapshot-blob", agent.TSCSnapshot, ts.Source}, ts.Compile)
}
