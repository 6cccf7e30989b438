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

// assembleJavaScript is prompt + completion + "\n" + test, run by node.
// The tests use console.assert, which prints "Assertion failed" to stderr
// and still exits 0, so stderr must stay empty too (see [Judge]).
//
// npm packages the task's own reference code requires (JavaScript/162:
// js-md5) are asked for through the job's libraries. They are taken from
// the problem, never from the completion: a sample gets the environment
// its task defines, not what it asks for.
func assembleJavaScript(p Problem, completion string) Program {
	return Program{
		Lang:      JavaScript,
		File:      "main.js",
		Code:      p.Prompt + completion + "\n" + p.Test,
		Libraries: jsPackages(p.Prompt + p.CanonicalSolution + p.Test),
	}
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
