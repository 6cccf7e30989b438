// Package langs is the registry of languages sandq runs: names and aliases,
// the image each runs in (built from dockerfiles/<name>.Dockerfile by
// `make images`), the source file name, and the compile, run and version
// commands. Adding a language is adding one entry here and one Dockerfile
// (plus, optionally, files for the image in overlay/<name>/).
//
// Every command runs in the language's image as the job uid with the work
// dir (/work, a tmpfs that allows exec) as its current directory; the rootfs
// is read-only and HOME is /tmp. Compiled languages write their program into
// the work dir as ./main. Toolchain caches that would be rebuilt per job
// (Go's build cache, TypeScript's parsed declarations, javac's classes) are
// baked into the images read-only; the Dockerfiles say how.
package langs

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// Lang describes one language.
type Lang struct {
	// Name is the canonical name, used in jobs and image tags.
	Name string
	// Aliases are other accepted names (case-insensitive). They double as
	// file extensions: `enqueue run prog.rs` infers rust.
	Aliases []string
	// Source is the file the job's code is written to in the work dir.
	Source string
	// Compile, when set, runs before Run; a non-zero exit is the status
	// compile_error.
	Compile []string
	// Run runs the program; the job's args are appended.
	Run []string
	// Version prints the toolchain's version (on stdout or stderr); see
	// ParseVersion and Describe.
	Version []string
	// Limits are this language's defaults for limits a job leaves unset,
	// where the operator's defaults do not suit its toolchain. Zero fields
	// mean no override.
	Limits Limits
	// Install installs a job's libraries; nil when the language has no
	// package manager here (jobs asking for libraries are then rejected).
	Install *Installer
	// Prestart lets the agent start the interpreter of Run (or the
	// compiler of Compile, for TypeScript) before the next job arrives
	// (agent.Step.Prestart): set where the agent knows how to make that
	// identical to a cold start (Python: a fork server; Node.js, Ruby and
	// sandq-tsc: started on a FIFO where the script will be).
	Prestart bool
	// Options are environment variables a job may set to pick a variant
	// of the toolchain, each with the values accepted, the default first.
	// A job's env is checked against them at enqueue.
	Options map[string][]string
	// Session reports that the language has stateful sessions: a driver
	// in langs/session (whose tests check the two agree).
	Session bool
	// MemoryErrors are what the language's runtime prints to stderr when
	// it runs out of memory before the sandbox kills it (the JVM's heap is
	// smaller than the job's memory): a judged case that fails with one is
	// memory_limit, as judges have it, not runtime_error.
	MemoryErrors []string
	// CrashMarkers are what the runtime prints to stderr when a program
	// ends on an uncaught error (a traceback, a panic): a judge's checker
	// that exits so has crashed (checker_error), even with the exit code
	// 1 that also means "rejected".
	CrashMarkers []string
}

// Limits are per-language defaults, in the units of jobs.Limits. A job's
// own value always wins, and the operator's caps still bound the result.
// Zero means: use the operator's default. They size the whole container, so
// the compile step (which runs in it) is what usually needs them. The
// worker's handler applies them to the limits a job leaves zero, ahead of
// the operator's defaults.
type Limits struct {
	MemoryMB  int64
	Pids      int64
	TimeoutMS int64
}

// DefaultImagePrefix starts the name of every language image that `make
// images` builds: sandq/<lang>:latest.
const DefaultImagePrefix = "sandq/"

// GoTrimRecord is where the go image's read-only build cache keeps the
// time of its last trim (its trim.txt is a link here, go.Dockerfile): the
// go command rewrites that record a day after it was written, which would
// fail in the read-only cache and fail the build. The compile step writes
// the current time here first, so the trim is never due.
const GoTrimRecord = "/tmp/.sandq-go-trim.txt"

// Image returns the image name for the language under prefix (default
// DefaultImagePrefix), e.g. "sandq/python:latest".
func (l Lang) Image(prefix string) string {
	if prefix == "" {
		prefix = DefaultImagePrefix
	}
	return prefix + l.Name + ":latest"
}

// The JVM flags: serial GC (one CPU by default; fewer threads, smaller
// footprint), no hsperfdata file in /tmp, class-data-sharing archives baked
// into the image (java.Dockerfile), and for javac the C1 compiler only: a
// third of javac's default start-up. Programs get half the container's
// memory as heap (the JVM's default is a quarter) and 8 MiB thread stacks,
// as native programs have.
var (
	javacFlags = []string{
		"-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-J-XX:-UsePerfData",
		"-J-XX:SharedArchiveFile=/usr/lib/sandq/java/javac.jsa", "-J-Xshare:auto",
	}
	// The class path: the work dir, then the jars of an installed library
	// set (absent unless the job asked for libraries).
	javaClassPath = ".:" + LibsDir + "/java/*"
	javaFlags     = []string{
		"-XX:+UseSerialGC", "-XX:-UsePerfData", "-XX:MaxRAMPercentage=50", "-Xss8m",
		"-XX:SharedArchiveFile=/usr/lib/sandq/java/run.jsa", "-Xshare:auto",
	}
)

var registry = []Lang{
	{
		Name: "python", Aliases: []string{"py", "python3"},
		CrashMarkers: []string{"Traceback (most recent call last):"},
		MemoryErrors: []string{"\nMemoryError"},
		Source:       "main.py",
		Run:          []string{"python3", "main.py"},
		Version:      []string{"python3", "--version"},
		Install:      pipInstaller,
		Prestart:     true,
		Session:      true,
	},
	{
		Name: "javascript", Aliases: []string{"js", "node", "nodejs"},
		CrashMarkers: []string{"\nNode.js v"},
		Source:       "main.js",
		Run:          []string{"node", "main.js"},
		Version:      []string{"node", "-p", `"Node.js " + process.version`},
		Install:      npmInstaller,
		Prestart:     true,
		Session:      true,
	},
	{
		// sandq-tsc is tsc from a startup snapshot with the declarations
		// already parsed (typescript.Dockerfile); options: ES2022, CommonJS,
		// @types/node, esModuleInterop, skipLibCheck, not strict.
		Name: "typescript", Aliases: []string{"ts"},
		CrashMarkers: []string{"\nNode.js v"},
		Source:       "main.ts",
		Compile:      []string{"node", "--snapshot-blob", "/usr/lib/sandq/ts/tsc.blob", "main.ts"},
		Run:          []string{"node", "main.js"},
		Install:      tsInstaller,
		Prestart:     true, // the compiler: booting its snapshot is 300 of its 330 ms
		Version:      []string{"node", "-p", `"TypeScript " + require("/usr/share/nodejs/typescript/package.json").version + ", Node.js " + process.version`},
	},
	{
		// The file is Main.java with a public class Main; javac then
		// `java -ea Main` (assertions on), as HumanEval-X does.
		Name:         "java",
		CrashMarkers: []string{"Exception in thread \"main\""},
		MemoryErrors: []string{"java.lang.OutOfMemoryError"},
		Source:       "Main.java",
		Compile:      slices.Concat([]string{"javac"}, javacFlags, []string{"-encoding", "UTF-8", "-cp", javaClassPath, "-d", ".", "Main.java"}),
		Run:          slices.Concat([]string{"java"}, javaFlags, []string{"-ea", "-cp", javaClassPath, "Main"}),
		Version:      []string{"java", "--version"},
		Install:      mavenInstaller,
	},
	{
		// C++17. libssl-dev is in the image and -lcrypto on the link line
		// (kept only when used, --as-needed): <openssl/md5.h> works.
		//
		// 512 MiB: cc1plus is the hungriest compiler here. <bits/stdc++.h>
		// alone peaks at ~180 MiB at -O2, and with <regex> in use at ~290 MiB,
		// which 256 MiB kills.
		Name: "cpp", Aliases: []string{"c++", "cxx", "cc"},
		MemoryErrors: []string{"std::bad_alloc"},
		Source:       "main.cpp",
		Compile:      []string{"g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp", "-Wl,--as-needed", "-lcrypto", "-lm"},
		Run:          []string{"./main"},
		Version:      []string{"g++", "--version"},
		Limits:       Limits{MemoryMB: 512},
	},
	{
		Name:    "c",
		Source:  "main.c",
		Compile: []string{"gcc", "-std=gnu17", "-O2", "-pipe", "-o", "main", "main.c", "-lm"},
		Run:     []string{"./main"},
		Version: []string{"gcc", "--version"},
	},
	{
		// The work dir becomes a module: a go.mod (and go.sum) requiring
		// testify v1.8.0 is put there unless the job brings one. Modules come
		// only from the image (GOPROXY is a local directory); every .go file of
		// the work dir is part of package main. The build cache's trim
		// record is written first (GoTrimRecord).
		Name: "go", Aliases: []string{"golang"},
		CrashMarkers: []string{"\ngoroutine 1 [running]:"},
		Source:       "main.go",
		Compile: []string{"/bin/sh", "-c", "{ [ -e go.mod ] || cp /usr/lib/sandq/go/template/go.mod /usr/lib/sandq/go/template/go.sum .; } && " +
			"{ date +%s >" + GoTrimRecord + " || :; } && exec go build -ldflags='-s -w' -o main ."},
		Run:     []string{"./main"},
		Version: []string{"go", "version"},
		Install: goInstaller,
	},
	{
		// rustc directly, no cargo: one crate from main.rs, with std and
		// the image's prebuilt crates rand 0.8, regex 1 and md5 0.7
		// (RustCrates) in its extern prelude; or, with the env
		// SANDQ_RUST_RAND=0.7, rand 0.7 (the API before 0.8).
		Name: "rust", Aliases: []string{"rs"},
		Source:  "main.rs",
		Compile: []string{"/bin/sh", "-c", rustCompile()},
		Run:     []string{"./main"},
		Version: []string{"rustc", "--version"},
		Options: map[string][]string{RustRandOption: rustRandValues()},
	},
	{
		Name: "ruby", Aliases: []string{"rb"},
		CrashMarkers: []string{"(RuntimeError)", "(NoMethodError)", "(NameError)", "(ArgumentError)", "(TypeError)", "(ZeroDivisionError)", "(Errno::ENOENT)"},
		Source:       "main.rb",
		Run:          []string{"ruby", "main.rb"},
		Version:      []string{"ruby", "--version"},
		Install:      gemInstaller,
		Prestart:     true,
	},
	{
		// Plots become PNG files in $SANDQ_PLOTS_DIR without changes to the
		// program: see overlay/r/usr/lib/sandq/r/Rprofile.site.
		Name:         "r",
		CrashMarkers: []string{"Execution halted"},
		Source:       "main.R",
		Run:          []string{"Rscript", "main.R"},
		Version:      []string{"Rscript", "--version"},
		Install:      rInstaller,
		Session:      true,
	},
	{
		Name: "bash", Aliases: []string{"sh", "shell"},
		Source:  "main.sh",
		Run:     []string{"bash", "main.sh"},
		Version: []string{"bash", "--version"},
		Session: true,
	},
}

// PlotsDirEnv names the environment variable that holds the directory where
// a language's plot hook writes PNG files (R: plot-001.png, ...). Its
// default in the images is DefaultPlotsDir.
const (
	PlotsDirEnv     = "SANDQ_PLOTS_DIR"
	DefaultPlotsDir = "/tmp/sandq-plots"
)

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

// Catalog returns every language as validation sees it (jobs.Language),
// sorted by name: what a jobs.Policy offers.
func Catalog() []jobs.Language {
	var out []jobs.Language
	for _, l := range All() {
		jl := jobs.Language{
			Name: l.Name, Aliases: slices.Clone(l.Aliases), Source: l.Source, Session: l.Session,
			Limits:  jobs.Limits{MemoryMB: l.Limits.MemoryMB, Pids: l.Limits.Pids, TimeoutMS: l.Limits.TimeoutMS},
			Options: maps.Clone(l.Options),
		}
		if l.Install != nil {
			jl.Libraries = l.Install.Validate
		}
		out = append(out, jl)
	}
	return out
}

// Policy returns p with the languages of the registry when it names none:
// the policy of a producer or worker that offers sandq's languages.
func Policy(p jobs.Policy) jobs.Policy {
	if p.Languages == nil {
		p.Languages = Catalog()
	}
	return p
}

// Info is one language as `enqueue langs` lists it.
type Info struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
	// Libraries names the package manager that installs a job's
	// libraries; empty when the language has none.
	Libraries string `json:"libraries,omitempty"`
	// Version is ParseVersion of the output of the language's Version
	// command in its image; empty when that output is missing.
	Version string `json:"version"`
}

// ParseVersion turns the output of a Version command (stdout and stderr
// together) into one line: the first line that is not blank, with runs of
// white space collapsed, e.g. "Python 3.11.2" or "gcc (Debian 12.2.0-14)
// 12.2.0". It returns "" for empty output.
func ParseVersion(out []byte) string {
	for line := range bytes.Lines(out) {
		if f := strings.Fields(string(line)); len(f) > 0 {
			return strings.Join(f, " ")
		}
	}
	return ""
}

// Describe lists every language, sorted by name, with its aliases (sorted)
// and its version parsed from outputs, the Version commands' output keyed by
// canonical name. It does no I/O: the caller runs the commands (in the
// images) and passes what they printed; a language missing from outputs has
// an empty Version.
func Describe(outputs map[string][]byte) []Info {
	var out []Info
	for _, l := range All() {
		aliases := slices.Clone(l.Aliases)
		slices.Sort(aliases)
		info := Info{Name: l.Name, Aliases: aliases, Version: ParseVersion(outputs[l.Name])}
		if l.Install != nil {
			info.Libraries = l.Install.Tool
		}
		out = append(out, info)
	}
	return out
}

// RustCrates are the crates the rust image carries, built from Debian's
// packages (langs/dockerfiles/rust.Dockerfile): a rust job can use them
// without libraries, offline.
var RustCrates = []string{"rand", "regex", "md5"}

// RustRandOption is the env variable that picks the rust image's crate
// set: "0.8" (default: rand 0.8, regex 1.7, md5 0.7, from bookworm) or
// "0.7" (rand 0.7.3, regex 1.3, md5 0.7, from bullseye), whose
// gen_range(low, high) is the API HumanEvalPack's Rust tests use.
const RustRandOption = "SANDQ_RUST_RAND"

// rustCrateSets are the rust image's crate sets (see
// langs/dockerfiles/rust.Dockerfile) by the value of RustRandOption, the
// default first. Each directory holds the rlibs of RustCrates, as
// lib<crate>.rlib, and of their dependencies.
var rustCrateSets = []struct{ rand, dir string }{
	{"0.8", "/usr/lib/sandq/rust/deps"},
	{"0.7", "/usr/lib/sandq/rust/rand-0.7"},
}

// rustRandValues are the values RustRandOption accepts, the default first.
func rustRandValues() []string {
	var vs []string
	for _, s := range rustCrateSets {
		vs = append(vs, s.rand)
	}
	return vs
}

// rustCompile is the rust compile step's script: it picks the directory
// of the crate set RustRandOption names and runs rustc with it.
func rustCompile() string {
	values := rustRandValues()
	var b strings.Builder
	fmt.Fprintf(&b, `case "${%s:-%s}" in `, RustRandOption, values[0])
	for _, s := range rustCrateSets {
		fmt.Fprintf(&b, "%s) d=%s ;; ", s.rand, s.dir)
	}
	fmt.Fprintf(&b, `*) echo "%s=$%s: want %s" >&2; exit 2 ;; esac; `, RustRandOption, RustRandOption, strings.Join(values, " or "))
	b.WriteString(`exec rustc --edition 2021 -O -o main -L "dependency=$d"`)
	for _, c := range RustCrates {
		fmt.Fprintf(&b, ` --extern "%s=$d/lib%s.rlib"`, c, c)
	}
	b.WriteString(" main.rs")
	return b.String()
}
