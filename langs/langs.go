// Package langs is the registry of languages sandq runs: names and aliases,
// the image each runs in (built from dockerfiles/<name>.Dockerfile by
// `make images`), the source file name, and the compile and run commands.
// Adding a language is adding one entry here and one Dockerfile.
package langs

import (
	"sort"
	"strings"
)

// Lang describes one language.
type Lang struct {
	// Name is the canonical name, used in jobs and image tags.
	Name string
	// Aliases are other accepted names (case-insensitive).
	Aliases []string
	// Source is the file the job's code is written to in the work dir.
	Source string
	// Compile, when set, runs before Run; a non-zero exit is the status
	// compile_error.
	Compile []string
	// Run runs the program; the job's args are appended.
	Run []string
}

// Image returns the image name for the language under prefix (default
// "sandq/"), e.g. "sandq/python:latest".
func (l Lang) Image(prefix string) string {
	if prefix == "" {
		prefix = "sandq/"
	}
	return prefix + l.Name + ":latest"
}

var registry = []Lang{
	{
		Name: "python", Aliases: []string{"py", "python3"},
		Source: "main.py",
		Run:    []string{"python3", "main.py"},
	},
}

// Lookup finds a language by name or alias.
func Lookup(name string) (Lang, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, l := range registry {
		if l.Name == name {
			return l, true
		}
		for _, a := range l.Aliases {
			if a == name {
				return l, true
			}
		}
	}
	return Lang{}, false
}

// All returns every language, sorted by name.
func All() []Lang {
	out := append([]Lang(nil), registry...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names maps every accepted name and alias to its canonical name.
func Names() map[string]string {
	m := map[string]string{}
	for _, l := range registry {
		m[l.Name] = l.Name
		for _, a := range l.Aliases {
			m[a] = l.Name
		}
	}
	return m
}
