package eval

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sandq/sandq/langs"
)

// rustTestFn matches a #[test] attribute and the name of the function it
// marks, with comments between them (Rust/50 has one).
var rustTestFn = regexp.MustCompile(`#\[test\](?:\s|//[^\n]*\n|(?s:/\*.*?\*/))*fn\s+([A-Za-z_][A-Za-z0-9_]*)`)

// rustMain matches the definition of a function main.
var rustMain = regexp.MustCompile(`\bfn\s+main\s*\(\s*\)`)

// assembleRust puts "fn main(){}" and the declaration's lines in front of
// prompt + completion unless they are there already (the HumanEvalPack
// prompt carries both; a completion that repeats the function is not
// given its signature twice), then "\n" + test. The declarations use the
// crates rand, regex and md5, which the rust image carries prebuilt
// (langs.RustCrates); the tests use rand's API before 0.8, so the job
// picks the image's rand 0.7 set (langs.RustRandOption).
//
// The tests are #[test] functions in a #[cfg(test)] module, for cargo
// test or rustc --test. sandq's rust language builds a program with rustc
// and runs it, so the assembly makes the program run them itself, as
// cargo test would: the module loses #[cfg(test)], each #[test] function
// becomes a pub fn, the sample's own main is renamed (cargo test ignores
// it too) and a new main calls the tests in order. A failed assertion
// panics: exit status 101, a failed job. A test without #[test]
// functions is an error: every sample would pass.
//
// The new main prints the end-of-tests marker after the last call: not if
// a test panicked (exit status 101) or the program exited first
// (std::process::exit(0) in the function under test, or in a function
// the sample puts in .init_array, which runs before main).
func assembleRust(p Problem, completion, marker string) (Program, error) {
	names := rustTestFn.FindAllStringSubmatch(p.Test, -1)
	if len(names) == 0 {
		return Program{}, fmt.Errorf("eval: task %s: its test has no #[test] function, so every sample would pass", p.TaskID)
	}
	gen := p.Prompt + completion
	var b strings.Builder
	if !rustMain.MatchString(gen) {
		b.WriteString("fn main(){}\n")
	}
	for _, line := range strings.Split(p.Declaration, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(gen, line) {
			continue
		}
		if strings.HasPrefix(line, "fn") && strings.Contains(gen, strings.SplitN(line, "(", 2)[0]) {
			continue
		}
		b.WriteString(line + "\n")
	}
	// A generation that defines main twice keeps only the first.
	if parts := strings.Split(gen, "fn main()"); len(parts) > 2 {
		gen = strings.Join(parts[:2], "fn main()")
	}
	b.WriteString(gen)
	code := rustMain.ReplaceAllString(b.String(), "#[allow(dead_code)]\nfn sandq_sample_main()")

	test := strings.ReplaceAll(p.Test, "#[cfg(test)]", "")
	var calls strings.Builder
	for _, m := range names {
		fmt.Fprintf(&calls, "    tests::%s();\n", m[1])
	}
	test = rustTestFn.ReplaceAllString(test, "pub fn $1")
	code += "\n" + test + "\n\n// Added by sandq's eval: run the tests as cargo test would, then say they\n" +
		"// ran to the end.\nfn main() {\n" + calls.String() + rustEnd(marker) + "}\n"
	// Rust/32 and Rust/50's tests call gen_range(low, high), rand's API
	// before 0.8: the programs build against the image's rand 0.7 set.
	return Program{Lang: Rust, File: "main.rs", Code: code, Env: map[string]string{langs.RustRandOption: "0.7"}}, nil
}

// rustEnd prints the marker, on a line of its own, through paths that no
// macro or item of the sample's can shadow, and flushes stdout.
func rustEnd(marker string) string {
	return "    let mut sandq_out = ::std::io::stdout().lock();\n" +
		`    ::std::io::Write::write_all(&mut sandq_out, b"\n` + marker + `\n").unwrap();` + "\n" +
		"    ::std::io::Write::flush(&mut sandq_out).unwrap();\n"
}
