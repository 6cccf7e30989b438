package jobs

import (
	"errors"
	"path"
	"regexp"
	"strings"
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
	r, err := parseImageRef(ref)
	if err != nil {
		return ref, true
	}
	return r.familiar(), true
}

// ImageAllowed reports whether the image reference ref (as ImageRef
// returns it) matches one of the operator's patterns: path.Match globs
// ("sandq-test/*", "python:3.1?"), matched against the familiar form with
// its tag and against the fully qualified one ("docker.io/library/python:3.12").
func ImageAllowed(patterns []string, ref string) bool {
	full := ref
	if r, err := parseImageRef(ref); err == nil {
		full = r.full()
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
// environment built from a recipe (a valid name: whether it exists is the
// worker's to say).
func (p Policy) validateEnvironment(env string) error {
	if env == "" {
		return nil
	}
	if len(env) > maxEnvironmentBytes {
		return invalid("environment", "is %d bytes; the cap is %d", len(env), maxEnvironmentBytes)
	}
	raw, isImage := strings.CutPrefix(env, ImagePrefix)
	if !isImage {
		// NAME: an environment built from a recipe (the worker resolves
		// it, the tenant's own first, then the shared ones).
		if msg := ValidEnvironmentName(env); msg != "" {
			return invalid("environment", "%s; or name an image present on the engine as \"image:REF\"", msg)
		}
		return nil
	}
	if raw == "" {
		return invalid("environment", "%q names no image", env)
	}
	if strings.HasPrefix(raw, "sha256:") {
		// An image ID (the engine would take it as one): it names no
		// repository the allow-list could judge.
		return invalid("environment", "%q is not an image reference: name an image by its name and tag or digest, not by its ID", env)
	}
	r, err := parseImageRef(raw)
	if err != nil {
		return invalid("environment", "%q is not an image reference: %v", env, err)
	}
	if !p.CheckImages {
		return nil
	}
	ref := r.familiar()
	if len(p.ImageAllow) == 0 {
		return invalid("environment", "image %s is not allowed: this deployment allows no image (the operator's --image-allow)", ref)
	}
	if !ImageAllowed(p.ImageAllow, ref) {
		return invalid("environment", "image %s is not allowed by the operator's --image-allow", ref)
	}
	return nil
}

// An image reference, as the engines' grammar has it
// (github.com/distribution/reference; the contract links the standard
// library only): [DOMAIN/]PATH[:TAG][@DIGEST].
var (
	refComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$`)
	refDomain    = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$`)
	refTag       = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	refHexID     = regexp.MustCompile(`^[a-f0-9]{64}$`)
	refDigest    = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$`)
)

type imageRef struct {
	domain, path, tag, digest string
}

func parseImageRef(s string) (imageRef, error) {
	var r imageRef
	if len(s) > 255 {
		return r, errors.New("longer than 255 bytes")
	}
	name, digest, hasDigest := strings.Cut(s, "@")
	if hasDigest {
		if !refDigest.MatchString(digest) {
			return r, errors.New("invalid digest")
		}
		r.digest = digest
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		r.tag, name = name[i+1:], name[:i]
		if !refTag.MatchString(r.tag) {
			return r, errors.New("invalid tag")
		}
	}
	if first, rest, ok := strings.Cut(name, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost" || first != strings.ToLower(first)) {
		if !refDomain.MatchString(first) {
			return r, errors.New("invalid domain")
		}
		r.domain, name = first, rest
	}
	if name == "" {
		return r, errors.New("no repository name")
	}
	if refHexID.MatchString(name) {
		return r, errors.New("a 64-hex-digit name is an image ID, not a repository")
	}
	for _, c := range strings.Split(name, "/") {
		if !refComponent.MatchString(c) {
			return r, errors.New("invalid repository name (lowercase letters, digits and separators)")
		}
	}
	if r.domain == "" {
		r.domain = "docker.io"
	}
	if r.domain == "docker.io" && !strings.Contains(name, "/") {
		name = "library/" + name
	}
	r.path = name
	if r.tag == "" && r.digest == "" {
		r.tag = "latest"
	}
	return r, nil
}

func (r imageRef) suffix() string {
	s := ""
	if r.tag != "" {
		s += ":" + r.tag
	}
	if r.digest != "" {
		s += "@" + r.digest
	}
	return s
}

// full is the reference fully qualified: docker.io/library/python:3.12.
func (r imageRef) full() string { return r.domain + "/" + r.path + r.suffix() }

// familiar is the reference as the engines show it: python:3.12.
func (r imageRef) familiar() string {
	p := r.path
	if r.domain == "docker.io" {
		if rest, ok := strings.CutPrefix(p, "library/"); ok && !strings.Contains(rest, "/") {
			p = rest
		}
		return p + r.suffix()
	}
	return r.domain + "/" + p + r.suffix()
}
