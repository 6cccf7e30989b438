package jobs

import (
	"slices"
	"strings"
)

// Language is what validation needs to know of one language: its names,
// the file its code is written to, its own default limits, the variants a
// job may pick, how library names are checked and whether it has sessions.
// The language registry (package langs) makes one per language for
// [Policy.Languages]; jobs itself knows no language.
type Language struct {
	// Name is the canonical name.
	Name string
	// Aliases are other accepted names, matched case-insensitively.
	Aliases []string
	// Source is the work-dir file the job's code is written to
	// ("main.py"); an input file may not take its place.
	Source string
	// Limits are the language's defaults for limits a job leaves zero,
	// ahead of the operator's ([Policy.DefaultLimits]); zero fields have
	// none. The operator's caps bound them.
	Limits Limits
	// Options are environment variables a job may set to pick a variant of
	// the toolchain, each with its accepted values, the default first.
	Options map[string][]string
	// Libraries checks one library name against the language's package
	// manager's grammar; nil when the language has no package manager
	// (a job that lists libraries is then rejected).
	Libraries func(name string) error
	// Session reports that the language has stateful sessions.
	Session bool
}

// lookup returns the language of name (a canonical name or an alias,
// case-insensitively) among langs.
func lookup(langs []Language, name string) (Language, bool) {
	name = strings.ToLower(name)
	if name == "" {
		return Language{}, false
	}
	for _, l := range langs {
		if l.Name == name || slices.Contains(l.Aliases, name) {
			return l, true
		}
	}
	return Language{}, false
}
