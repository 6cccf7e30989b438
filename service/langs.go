package service

import (
	"context"
	"slices"

	"github.com/sandq/sandq/langs"
)

// Language is one language the workers run, as the doors list it.
type Language struct {
	Name    string
	Aliases []string
	// Libraries names the package manager that installs a job's
	// libraries; empty when there is none.
	Libraries string
	// Version is the toolchain's version as a worker read it from the
	// image, and Image that image; empty until a worker published them.
	Version, Image string
	// Plots: the language captures plots without changes to the program.
	Plots bool
	// Sessions: the language has stateful sessions.
	Sessions bool
}

// plotLangs capture plots without changes to the program.
var plotLangs = []string{"python", "r"}

// Languages lists every language, sorted by name, with the versions the
// workers published.
func (s *Service) Languages(ctx context.Context) ([]Language, error) {
	published, err := s.st.LangVersions(ctx)
	if err != nil {
		return nil, unavailable("cannot read the toolchain versions", err)
	}
	var out []Language
	for _, in := range langs.Describe(nil) {
		l, _ := langs.Lookup(in.Name)
		v := published[in.Name]
		out = append(out, Language{Name: in.Name, Aliases: in.Aliases, Libraries: in.Libraries, Version: v.Version,
			Image: v.Image, Plots: slices.Contains(plotLangs, in.Name), Sessions: l.Session})
	}
	return out, nil
}
