package langs

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInstallerGrammars(t *testing.T) {
	t.Parallel()
	hostile := []string{
		"numpy; rm -rf /", "--index-url=http://evil", "-e", "x && y", "$(id)", "`id`", "a|b",
		"../../etc/passwd", "/abs/path", "http://evil.example/pkg.tar.gz", "file:../x", "git+https://x/y",
		"a b", "a\nb", "", "pkg\x00", "é",
	}
	for _, tt := range []struct {
		lang     string
		good     []string
		badExtra []string
	}{
		{"python", []string{"numpy", "requests[socks]>=2.31", "scikit-learn==1.5.0", "a", "zope.interface", "x>=1,<2", "Pillow~=10.0"},
			[]string{"numpy @ https://x", "numpy;python_version<'3'", "pkg==1.0 ; os_name=='nt'", "[x]", "a[b"}},
		{"javascript", []string{"js-md5", "lodash@4.17.21", "@types/node", "@types/node@20", "left-pad@^1.3.0", "x@>=1"},
			[]string{"Upper", "@scope", "@scope/", "a/b", "github:user/repo", "x@1 || 2", "npm:x@1", "./local"}},
		{"go", []string{"github.com/google/uuid", "github.com/google/uuid@v1.6.0", "golang.org/x/exp@latest", "gopkg.in/yaml.v3"},
			[]string{"uuid", "github.com/../x", "github.com/a//b", "-x", "github.com/a@v1@v2", ".hidden.com/x"}},
		{"r", []string{"data.table", "ggplot2", "R6"}, []string{"ggplot2_3.5", "2pkg", "pkg.", "pkg==1"}},
		{"ruby", []string{"colorize", "rake:13.2.1", "nokogiri", "activesupport"}, []string{"rake:>=1", "rake -v 1", "rake:1:2"}},
		{"java", []string{"com.google.code.gson:gson:2.11.0", "org.json:json:20240303"}, []string{"gson", "a:b", "a:b:c:d:e", "a:b:../c"}},
	} {
		l, ok := Lookup(tt.lang)
		require.True(t, ok, tt.lang)
		require.NotNil(t, l.Install, "%s has an installer", tt.lang)
		for _, name := range tt.good {
			require.NoError(t, l.Install.Validate(name), "%s: %q is valid", tt.lang, name)
		}
		for _, name := range slices.Concat(hostile, tt.badExtra) {
			require.Error(t, l.Install.Validate(name), "%s: %q must be rejected", tt.lang, name)
		}
	}
}

// TestInstallerCommands: names are separate argv entries after "--" (or
// after a script's fixed arguments), never in a shell's command string.
func TestInstallerCommands(t *testing.T) {
	t.Parallel()
	names := []string{"alpha", "beta"}
	for _, l := range All() {
		if l.Install == nil {
			continue
		}
		cmds := l.Install.Commands("/sandq/libs/.staging-x", names, Mirrors{})
		require.NotEmpty(t, cmds, l.Name)
		var install []Command
		for _, c := range cmds {
			require.NotContains(t, []string{"sh", "/bin/sh", "bash", "/bin/bash"}, c.Argv[0], l.Name)
			if c.Name == "install" {
				install = append(install, c)
			}
		}
		require.Len(t, install, 1, "%s: one package manager command", l.Name)
		require.False(t, install[0].Optional, l.Name)
		argv := install[0].Argv
		require.Equal(t, names, argv[len(argv)-2:], "%s: names last, one argv entry each", l.Name)
		for _, c := range cmds {
			for _, a := range c.Argv {
				if strings.Contains(a, "/sandq/libs/") {
					require.True(t, strings.HasPrefix(a, "/sandq/libs/.staging-x"), "%s writes only into its staging dir: %q", l.Name, a)
				}
			}
		}
	}
	pip, _ := Lookup("python")
	argv := pip.Install.Commands("/d", names, Mirrors{PipIndexURL: "http://10.0.0.1:8080/simple"})[0].Argv
	require.Subset(t, argv, []string{"--index-url", "http://10.0.0.1:8080/simple", "--trusted-host", "10.0.0.1", "--target", "/d/python"})
	argv = pip.Install.Commands("/d", names, Mirrors{})[0].Argv
	require.Contains(t, argv, DefaultMirrors.PipIndexURL)
	require.NotContains(t, argv, "--trusted-host", "an https index needs no --trusted-host")
}

func TestMirrorsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultMirrors.Validate())
	require.NoError(t, Mirrors{}.Validate())
	require.ErrorContains(t, Mirrors{PipIndexURL: "ftp://x/simple"}.Validate(), "pip index URL")
	require.ErrorContains(t, Mirrors{NpmRegistry: "registry.npmjs.org"}.Validate(), "npm registry")
}
