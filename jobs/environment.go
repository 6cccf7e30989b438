package jobs

import (
	"path"
	"strings"

	"github.com/distribution/reference"
)

// ImagePrefix starts an environment that names an image present on the
// engine: "image:REF" (docs/environments.md).
const ImagePrefix = "image:"

// maxEnvironmentBytes caps Job.Environment and SessionSpec.Environment.
const maxEnvironmentBytes = 256

// ImageRef returns the image reference of an "image:REF" environment, in
// its familiar form with its tag (":latest" when it names none), and
// whether env is one. A REF that does not parse is returned as written.
func ImageRef(env string) (string, bool) {
	ref, ok := strings.CutPrefix(env, ImagePrefix)
	if !ok {
		return "", false
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref, true
	}
	return reference.FamiliarString(reference.TagNameOnly(named)), true
}

// ImageAllowed reports whether the image reference ref (as ImageRef
// returns it) matches one of the operator's patterns: path.Match globs
// ("sandq-test/*", "python:3.1?"), matched against the familiar form with
// its tag and against the fully qualified one ("docker.io/library/python:3.12").
func ImageAllowed(patterns []string, ref string) bool {
	full := ref
	if named, err := reference.ParseNormalizedNamed(ref); err == nil {
		full = reference.TagNameOnly(named).String()
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, ref); ok {
			return true
		}
		if ok, _ := path.Match(p, full); ok {
			return true
		}
	}
	return false
}

// CheckImagePatterns checks the operator's --image-allow patterns.
func CheckImagePatterns(patterns []string) error {
	for _, p := range patterns {
		if p == "" {
			return invalid("image-allow", "an empty pattern")
		}
		if _, err := path.Match(p, ""); err != nil {
			return invalid("image-allow", "pattern %q: %v", p, err)
		}
	}
	return nil
}

// validateEnvironment checks Job.Environment and SessionSpec.Environment:
// "image:REF" with REF a valid image reference (a name, optionally a tag
// and a digest; never a bare image ID), admitted by the operator's
// ImageAllow when the policy knows it (CheckImages); or NAME, an
// environment built from a recipe, which this version does not build yet.
func (p Policy) validateEnvironment(env string) error {
	if env == "" {
		return nil
	}
	if len(env) > maxEnvironmentBytes {
		return invalid("environment", "is %d bytes; the cap is %d", len(env), maxEnvironmentBytes)
	}
	raw, isImage := strings.CutPrefix(env, ImagePrefix)
	if !isImage {
		if msg := CheckName(env, maxEnvironmentBytes); msg != "" {
			return invalid("environment", "%s", msg)
		}
		return invalid("environment", "%q names an environment built from a recipe, which this version does not build; name an image present on the engine as \"image:REF\"", env)
	}
	if raw == "" {
		return invalid("environment", "%q names no image", env)
	}
	named, err := reference.ParseNormalizedNamed(raw)
	if err != nil {
		return invalid("environment", "%q is not an image reference: %v", env, err)
	}
	if !p.CheckImages {
		return nil
	}
	ref := reference.FamiliarString(reference.TagNameOnly(named))
	if len(p.ImageAllow) == 0 {
		return invalid("environment", "image %s is not allowed: this deployment allows no image (the operator's --image-allow)", ref)
	}
	if !ImageAllowed(p.ImageAllow, ref) {
		return invalid("environment", "image %s is not allowed by the operator's --image-allow", ref)
	}
	return nil
}
