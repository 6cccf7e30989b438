package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// A Recipe says how sandq builds an environment (docs/environments.md,
// "Recipes"): a sandq language image plus Debian packages, libraries
// (installed as a job's) and files. A job names it as "environment": NAME.
type Recipe struct {
	// Name is what jobs name: [a-z0-9][a-z0-9_.-]*, at most 64 bytes.
	Name string `json:"name"`
	// Lang is the sandq language whose image is the base.
	Lang string `json:"lang"`
	// Packages are Debian packages, installed with apt-get from the
	// image's own sources ("jq", or "jq=1.6-2.1+deb12u3").
	Packages []string `json:"packages,omitempty"`
	// Libraries are installed with the language's installer, as a job's.
	Libraries []string `json:"libraries,omitempty"`
	// Files are written into the image, owned by root, mode 0644.
	Files []RecipeFile `json:"files,omitempty"`
	// Shared recipes are the operator's, for every tenant; a tenant's own
	// recipe of the same name comes first.
	Shared bool `json:"shared,omitempty"`
}

// RecipeFile is a file of a recipe: an absolute path and its content.
type RecipeFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Caps of a recipe.
const (
	maxRecipePackages  = 64
	maxRecipeFiles     = 32
	maxRecipeFileBytes = 256 * KiB
	maxRecipeBytes     = 1 * MiB
)

var (
	envName    = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	debPackage = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$`)
)

// recipeFileRoots are where recipe files may not go: the agent's, the
// job's scratch mounts and the kernel's file systems.
var recipeFileRoots = []string{"/sandq", "/work", "/tmp", "/proc", "/sys", "/dev", "/run", "/etc/passwd", "/etc/group"}

// ValidEnvironmentName reports why name cannot name a recipe ("" if it can).
func ValidEnvironmentName(name string) string {
	if !envName.MatchString(name) {
		return fmt.Sprintf("%q is not an environment name: 1 to 64 of a-z 0-9 _ . -, starting with a letter or digit", name)
	}
	return ""
}

// ValidateRecipe checks a recipe against the policy's languages and library grammar.
func (p Policy) ValidateRecipe(r Recipe) error {
	p = p.WithDefaults()
	if msg := ValidEnvironmentName(r.Name); msg != "" {
		return invalid("name", "%s", msg)
	}
	l, ok := lookup(p.Languages, r.Lang)
	if !ok {
		return invalid("lang", "unknown language %q", r.Lang)
	}
	if len(r.Packages) > maxRecipePackages {
		return invalid("packages", "has %d entries; the cap is %d", len(r.Packages), maxRecipePackages)
	}
	for i, pk := range r.Packages {
		if !debPackage.MatchString(pk) {
			return invalid(fmt.Sprintf("packages[%d]", i), "%q is not a Debian package name (optionally =version)", pk)
		}
	}
	if len(r.Libraries) > 0 && l.Libraries == nil {
		return invalid("libraries", "%s has no package manager in sandq; libraries are not supported for it", l.Name)
	}
	if err := p.validateLibraries(r.Lang, r.Libraries); err != nil {
		return err
	}
	if len(r.Files) > maxRecipeFiles {
		return invalid("files", "has %d entries; the cap is %d", len(r.Files), maxRecipeFiles)
	}
	total := 0
	seen := map[string]bool{}
	for i, f := range r.Files {
		field := fmt.Sprintf("files[%d]", i)
		clean := path.Clean(f.Path)
		switch {
		case !path.IsAbs(f.Path) || clean != f.Path || clean == "/":
			return invalid(field, "path %q must be absolute and clean", f.Path)
		case strings.ContainsFunc(f.Path, func(r rune) bool { return r < ' ' || r == 0x7f }) || !utf8.ValidString(f.Path):
			return invalid(field, "path %q contains control characters or invalid UTF-8", f.Path)
		case len(f.Content) > maxRecipeFileBytes:
			return invalid(field, "is %d bytes; the cap is %d", len(f.Content), maxRecipeFileBytes)
		case seen[clean]:
			return invalid(field, "path %q is given twice", f.Path)
		}
		for _, root := range recipeFileRoots {
			if clean == root || strings.HasPrefix(clean, root+"/") {
				return invalid(field, "path %q is under %s, which sandq owns", f.Path, root)
			}
		}
		seen[clean] = true
		total += len(f.Content)
	}
	if total > maxRecipeBytes {
		return invalid("files", "hold %d bytes; the cap is %d", total, maxRecipeBytes)
	}
	return nil
}

// Hash is the recipe's build hash: the SHA-256 of the canonical JSON of
// what decides the image (language, base image ID, packages and libraries
// sorted, files sorted by path), hex. Name, tenant and Shared are not in
// it: two recipes that build the same image share it.
func (r Recipe) Hash(baseImageID string) string {
	pk := slices.Compact(slices.Sorted(slices.Values(r.Packages)))
	lb := slices.Compact(slices.Sorted(slices.Values(r.Libraries)))
	fs := slices.Clone(r.Files)
	slices.SortFunc(fs, func(a, b RecipeFile) int { return strings.Compare(a.Path, b.Path) })
	b, _ := json.Marshal(struct {
		V         int          `json:"v"`
		Lang      string       `json:"lang"`
		Base      string       `json:"base"`
		Packages  []string     `json:"packages"`
		Libraries []string     `json:"libraries"`
		Files     []RecipeFile `json:"files"`
	}{1, r.Lang, baseImageID, pk, lb, fs})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Key is the recipe's hash without a base image: what decides the image
// but the language image's ID, which only the workers' engines know. The
// build records (store.EnvBuild.Recipe) carry it, so the doors find an
// environment's builds without an engine.
func (r Recipe) Key() string { return r.Hash("") }

// EnvImageRepo is the repository of the image built from a recipe of hash h.
func EnvImageRepo(hash string) string { return "sandq-env/" + hash[:12] }
