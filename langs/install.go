package langs

import (
	"cmp"
	_ "embed"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// LibsDir is a stable path to an installed library set in compile and run
// steps: a symbolic link (sandbox.LibsLink) to the set's own directory in
// its read-only volume. Installers write into that directory directly, and
// Env and Prepare get it, so paths stored at install time (Go's build
// cache) are the paths jobs see.
const LibsDir = "/sandq/libs/current"

// Installer installs a job's libraries with the language's package
// manager, in a step of its own that has a network; see the worker's
// handler and sandbox.Pool.Install. Names are checked against the
// ecosystem's grammar at enqueue (Validate) and reach the installer as
// separate argv entries after "--", never through a shell.
type Installer struct {
	// Tool names the package manager ("pip", "npm", ...).
	Tool string
	// Grammar describes an accepted name, for error messages.
	Grammar string
	re      *regexp.Regexp
	// steps returns the commands that install names into dir.
	steps func(dir string, names []string, m Mirrors) []Command
	// env is added to the compile and run steps' environment; dir is the
	// set's directory.
	env func(dir string) []string
	// prepare runs in the work dir before the compile step.
	prepare func(dir string) [][]string
	// files are written into the install step's work dir.
	files map[string][]byte
}

// Command is one install command: argv and the environment it adds.
type Command struct {
	// Name is the step's name: "install" for the package manager's own
	// command, "setup" or "warm" for commands around it.
	Name string
	Argv []string
	Env  []string
	// Optional commands may fail without failing the install (a warm-up
	// that only saves later jobs time).
	Optional bool
}

// Mirrors are where installers download from. Zero fields use
// DefaultMirrors.
type Mirrors struct {
	// PipIndexURL is pip's --index-url (a PEP 503 simple index). An http://
	// index is also passed as --trusted-host.
	PipIndexURL string `json:"pip_index_url,omitempty"`
	// NpmRegistry is npm's --registry.
	NpmRegistry string `json:"npm_registry,omitempty"`
	// GoProxy and GoSumDB are GOPROXY and GOSUMDB ("off" disables checksum
	// verification against a database; go.sum is still written).
	GoProxy string `json:"go_proxy,omitempty"`
	GoSumDB string `json:"go_sumdb,omitempty"`
	// CRAN is the repository R's install.packages uses.
	CRAN string `json:"cran,omitempty"`
	// RubyGems is gem's --source.
	RubyGems string `json:"rubygems,omitempty"`
	// Maven is a Maven-layout repository that jars are fetched from.
	Maven string `json:"maven,omitempty"`
}

// DefaultMirrors are the public registries.
var DefaultMirrors = Mirrors{
	PipIndexURL: "https://pypi.org/simple",
	NpmRegistry: "https://registry.npmjs.org/",
	GoProxy:     "https://proxy.golang.org",
	GoSumDB:     "sum.golang.org",
	CRAN:        "https://cloud.r-project.org",
	RubyGems:    "https://rubygems.org",
	Maven:       "https://repo1.maven.org/maven2",
}

// WithDefaults fills zero fields from DefaultMirrors.
func (m Mirrors) WithDefaults() Mirrors {
	d := DefaultMirrors
	return Mirrors{
		PipIndexURL: cmp.Or(m.PipIndexURL, d.PipIndexURL),
		NpmRegistry: cmp.Or(m.NpmRegistry, d.NpmRegistry),
		GoProxy:     cmp.Or(m.GoProxy, d.GoProxy),
		GoSumDB:     cmp.Or(m.GoSumDB, d.GoSumDB),
		CRAN:        cmp.Or(m.CRAN, d.CRAN),
		RubyGems:    cmp.Or(m.RubyGems, d.RubyGems),
		Maven:       cmp.Or(m.Maven, d.Maven),
	}
}

// Validate checks the URLs: absolute http or https, except GoSumDB (a
// name, optionally with a URL, or "off") and GoProxy (a GOPROXY list).
func (m Mirrors) Validate() error {
	for _, f := range []struct{ name, v string }{
		{"pip index URL", m.PipIndexURL}, {"npm registry", m.NpmRegistry}, {"CRAN mirror", m.CRAN},
		{"RubyGems source", m.RubyGems}, {"Maven repository", m.Maven},
	} {
		if f.v == "" {
			continue
		}
		u, err := url.Parse(f.v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("langs: %s %q is not an http(s) URL", f.name, f.v)
		}
	}
	return nil
}

// Validate checks one library name against the installer's grammar.
func (in *Installer) Validate(name string) error {
	if len(name) > 214 {
		return fmt.Errorf("%q is longer than 214 bytes", name)
	}
	if !in.re.MatchString(name) {
		return fmt.Errorf("%q is not a valid %s library: want %s", name, in.Tool, in.Grammar)
	}
	return nil
}

// Commands returns the commands that install names into dir, an absolute
// directory that LibsDir links to once they all succeed.
func (in *Installer) Commands(dir string, names []string, m Mirrors) []Command {
	cmds := in.steps(dir, names, m.WithDefaults())
	for i := range cmds {
		if cmds[i].Name == "" {
			cmds[i].Name = "install"
		}
	}
	return cmds
}

// Env is what compile and run steps need in their environment to use the
// set installed in dir.
func (in *Installer) Env(dir string) []string {
	if in.env == nil {
		return nil
	}
	return in.env(dir)
}

// Prepare returns commands to run in the work dir before the compile and
// run steps of a job that uses the set installed in dir.
func (in *Installer) Prepare(dir string) [][]string {
	if in.prepare == nil {
		return nil
	}
	return in.prepare(dir)
}

// Files are installer scripts to write into the install step's work dir,
// by path relative to it.
func (in *Installer) Files() map[string][]byte { return in.files }

var (
	//go:embed install/install.R
	installR []byte
	//go:embed install/Fetch.java
	fetchJava []byte
)

// Name grammars. Each admits only what the ecosystem calls a package name
// with an optional version: no URLs, paths, options, markers or spaces.
var (
	// PEP 508 names with extras and version specifiers, no markers, no URLs.
	pipVersion = `(?:~=|==|!=|<=|>=|<|>|===)[A-Za-z0-9.*+!_-]+`
	pipRE      = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?` +
		`(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?` +
		`(?:` + pipVersion + `(?:,` + pipVersion + `)*)?$`)
	// npm: optional @scope/, a lowercase name, optional @version or range
	// (no spaces, so one comparator).
	npmRE = regexp.MustCompile(`^(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*(?:@[A-Za-z0-9.^~<>=*|+_-]+)?$`)
	// Go: a module path whose first element has a dot, optional @version.
	goRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)+(?:/[A-Za-z0-9_~+-][A-Za-z0-9._~+-]*)*(?:@[A-Za-z0-9][A-Za-z0-9._+-]*)?$`)
	// CRAN: letters, digits and dots, starting with a letter.
	rRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.]*[A-Za-z0-9]$`)
	// RubyGems: a gem name, optional :version.
	gemRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(?::[0-9][0-9A-Za-z.]*)?$`)
	// Maven: group:artifact:version.
	mavenRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*:[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)
)

func argv(fixed []string, names []string) []string {
	out := append(append([]string(nil), fixed...), "--")
	return append(out, names...)
}

var (
	pipInstaller = &Installer{
		Tool: "pip", Grammar: "name[extras] with optional version specifiers (numpy, requests[socks]>=2.31)",
		re: pipRE,
		steps: func(dir string, names []string, m Mirrors) []Command {
			fixed := []string{"python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
				"--no-input", "--progress-bar", "off", "--no-warn-script-location",
				"--target", dir + "/python", "--index-url", m.PipIndexURL}
			if u, err := url.Parse(m.PipIndexURL); err == nil && u.Scheme == "http" {
				fixed = append(fixed, "--trusted-host", u.Hostname())
			}
			return []Command{{Argv: argv(fixed, names)}}
		},
		env: func(dir string) []string { return []string{"PYTHONPATH=" + dir + "/python"} },
	}
	npmInstaller = &Installer{
		Tool: "npm", Grammar: "[@scope/]name[@version] (lodash, @types/node@20, js-md5@^0.8)",
		re: npmRE,
		steps: func(dir string, names []string, m Mirrors) []Command {
			fixed := []string{"npm", "install", "--prefix", dir + "/node", "--registry", m.NpmRegistry,
				"--cache", "/tmp/.npm", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel", "warn"}
			return []Command{
				{Name: "setup", Argv: []string{"mkdir", "-p", dir + "/node"}},
				{Argv: argv(fixed, names)},
			}
		},
		env: func(dir string) []string { return []string{"NODE_PATH=" + dir + "/node/node_modules"} },
	}
	// TypeScript installs with npm too. tsc does not read NODE_PATH: it
	// looks for node_modules beside the program, so the set's is linked
	// there.
	tsInstaller = &Installer{
		Tool: npmInstaller.Tool, Grammar: npmInstaller.Grammar, re: npmInstaller.re,
		steps: npmInstaller.steps, env: npmInstaller.env,
		prepare: func(dir string) [][]string {
			return [][]string{{"ln", "-s", "--", dir + "/node/node_modules", "node_modules"}}
		},
	}
	goInstaller = &Installer{
		Tool: "go", Grammar: "a module path with optional @version (github.com/google/uuid@v1.6.0)",
		re: goRE,
		steps: func(dir string, names []string, m Mirrors) []Command {
			d := dir + "/go"
			env := []string{
				"GOMODCACHE=" + d + "/mod", "GOPROXY=" + m.GoProxy, "GOSUMDB=" + m.GoSumDB,
				"GOFLAGS=-modcacherw -mod=mod", "GOCACHE=" + d + "/cache",
			}
			// The build cache: the image's (the standard library, compiled),
			// plus every package of the named modules, compiled here. Jobs
			// use it read-only, as they use the image's; a package missing
			// from it cannot be compiled then (no writable cache).
			var pkgs []string
			for _, n := range names {
				path, _, _ := strings.Cut(n, "@")
				pkgs = append(pkgs, path+"/...")
			}
			return []Command{
				{Name: "setup", Argv: []string{"mkdir", "-p", d}},
				{Name: "setup", Argv: []string{"cp", "/usr/lib/sandq/go/template/go.mod", "/usr/lib/sandq/go/template/go.sum", d + "/"}},
				{Name: "install", Argv: argv([]string{"go", "-C", d, "get"}, names), Env: env},
				{Name: "setup", Argv: []string{"cp", "-a", "/usr/lib/sandq/go/cache", d + "/cache"}},
				{Name: "warm", Argv: argv([]string{"go", "-C", d, "build"}, pkgs), Env: env, Optional: true},
			}
		},
		// The work dir's go.mod (the job's or the image's template) only
		// marks the module root; the set's go.mod and go.sum are used
		// instead, read-only, and no module is fetched at build time.
		env: func(dir string) []string {
			return []string{
				"GOMODCACHE=" + dir + "/go/mod", "GOPROXY=off", "GOCACHE=" + dir + "/go/cache",
				"GOFLAGS=-mod=readonly -modfile=" + dir + "/go/go.mod",
			}
		},
	}
	rInstaller = &Installer{
		Tool: "R", Grammar: "a CRAN package name (data.table, ggplot2)",
		re: rRE,
		steps: func(dir string, names []string, m Mirrors) []Command {
			return []Command{{Argv: append([]string{"Rscript", ".sandq/install.R", dir + "/r", m.CRAN}, names...)}}
		},
		env:   func(dir string) []string { return []string{"R_LIBS=" + dir + "/r"} },
		files: map[string][]byte{".sandq/install.R": installR},
	}
	gemInstaller = &Installer{
		Tool: "gem", Grammar: "a gem name with optional :version (colorize, rake:13.2.1)",
		re: gemRE,
		steps: func(dir string, names []string, m Mirrors) []Command {
			// No "--": gem passes what follows it to extension builds. The
			// grammar keeps names from starting with '-'.
			fixed := []string{"gem", "install", "--install-dir", dir + "/ruby", "--no-document",
				"--clear-sources", "--source", m.RubyGems}
			return []Command{{Argv: append(fixed, names...)}}
		},
		env: func(dir string) []string { return []string{"GEM_PATH=" + dir + "/ruby"} },
	}
	mavenInstaller = &Installer{
		Tool: "maven", Grammar: "group:artifact:version (com.google.code.gson:gson:2.11.0); dependencies are not resolved",
		re: mavenRE,
		steps: func(dir string, names []string, m Mirrors) []Command {
			return []Command{{Argv: append([]string{"java", "-XX:+UseSerialGC", ".sandq/Fetch.java", m.Maven, dir + "/java"}, names...)}}
		},
		files: map[string][]byte{".sandq/Fetch.java": fetchJava},
		// The java and javac commands put LibsDir/java/* on the class path.
	}
)
