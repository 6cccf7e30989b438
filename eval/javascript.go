package eval

import (
	"regexp"
	"slices"
	"strings"
)

// jsRequire matches require('name') and require("name").
var jsRequire = regexp.MustCompile(`\brequire\(\s*['"]([^'"]+)['"]\s*\)`)

// nodeBuiltins are modules that need no installation.
var nodeBuiltins = []string{
	"assert", "buffer", "child_process", "crypto", "events", "fs", "os", "path",
	"process", "querystring", "readline", "stream", "string_decoder", "url", "util", "zlib",
}

// assembleJavaScript is prompt + completion + "\n" + test, run by node,
// then the print of the end-of-tests marker. The tests use
// console.assert, which prints "Assertion failed" to stderr and still
// exits 0, so stderr must stay empty too (see [Judge]). The HumanEvalPack
// tests are synchronous calls at the top level of the script: the marker
// statement after them runs once they all have, and not if the program
// exited first (process.exit(0) in the completion).
//
// npm packages the task's own reference code requires (JavaScript/162:
// js-md5) are asked for through the job's libraries. They are taken from
// the problem, never from the completion: a sample gets the environment
// its task defines, not what it asks for.
func assembleJavaScript(p Problem, completion, marker string) Program {
	return Program{
		Lang:      JavaScript,
		File:      "main.js",
		Code:      p.Prompt + completion + "\n" + p.Test + jsEnd(marker),
		Libraries: jsPackages(p.Prompt + p.CanonicalSolution + p.Test),
	}
}

// jsEnd is the end of a JavaScript program: the marker's print, on a line
// of its own. The leading ";" ends whatever statement the test left
// open; globalThis.process spares a module-level name "process" of the
// sample's. A write to stdout is synchronous for files and pipes on
// Linux, so it is out before node exits.
func jsEnd(marker string) string {
	return "\n\n// Added by sandq's eval: the tests ran to the end.\n" +
		`;globalThis.process.stdout.write("\n` + marker + `\n")` + "\n"
}

// jsPackages returns the npm packages code requires, sorted: names that
// are neither node builtins ("fs", "node:fs") nor relative paths.
func jsPackages(code string) []string {
	var pkgs []string
	for _, m := range jsRequire.FindAllStringSubmatch(code, -1) {
		name := m[1]
		if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "node:") ||
			slices.Contains(nodeBuiltins, strings.SplitN(name, "/", 2)[0]) {
			continue
		}
		pkgs = append(pkgs, name)
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}
