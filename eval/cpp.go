package eval

import (
	"fmt"
	"regexp"
	"strings"
)

// cppHelperIncludes are prepended to C++ programs unless the prompt
// includes them already (HumanEval-X's C++ import helper).
var cppHelperIncludes = []string{
	"stdlib.h", "algorithm", "math.h", "stdio.h", "vector", "string", "climits", "cstring", "iostream",
}

// cppTestMain matches the main function the test defines.
var cppTestMain = regexp.MustCompile(`\bint\s+main\s*\(`)

// assembleCPP is the helper includes the prompt lacks, then prompt +
// completion + "\n" + test (which holds main). Compiled as C++17 (the
// cpp language's g++ flags). CPP/162 includes openssl/md5.h and needs
// -lcrypto at link time.
//
// The test's main is renamed sandq_tests_<nonce> and gets a "return 0;"
// at the end of its body (its asserts fall off the end, which is defined
// only for main). The program's main, which calls it and then prints the
// end-of-tests marker, comes first in the file, with its own includes:
// before the sample's code, so that no macro of the sample (#define
// applies to the text after it) can change it, and the renamed function's
// name holds the nonce, so that no macro of the sample can name it either.
// The marker is printed after every assert has held (a failed one
// aborts), and not if the program exited first (exit(0) or _exit(0) in a
// global constructor, which runs before main, or in the function under
// test).
func assembleCPP(p Problem, completion, nonce string) (Program, error) {
	tests := "sandq_tests_" + nonce
	test, err := cppRenameMain(p.Test, tests)
	if err != nil {
		return Program{}, fmt.Errorf("eval: task %s: %w", p.TaskID, err)
	}
	var b strings.Builder
	b.WriteString(cppMain(tests, markerOf(nonce)))
	have := strings.ReplaceAll(p.Prompt, " ", "")
	for _, h := range cppHelperIncludes {
		inc := "#include<" + h + ">"
		if !strings.Contains(have, inc) {
			b.WriteString(inc + "\n")
		}
	}
	b.WriteString(p.Prompt + completion + "\n" + test)
	return Program{Lang: CPP, File: "main.cpp", Code: b.String()}, nil
}

// cppMain is the start of a C++ program: the main that runs the test's
// main (declared, defined by the test at the end of the file) and prints
// the marker. The marker goes through stdio after std::cout is flushed,
// so that it comes after whatever the tests printed either way.
func cppMain(tests, marker string) string {
	return "// Added by sandq's eval: main runs the test's main (renamed " + tests + "),\n" +
		"// then says the tests ran to the end.\n" +
		"#include <stdio.h>\n" +
		"#include <iostream>\n" +
		"int " + tests + "();\n" +
		"int main() {\n" +
		"    int status = " + tests + "();\n" +
		"    if (status != 0) return status;\n" +
		"    std::cout.flush();\n" +
		`    fputs("\n` + marker + `\n", stdout);` + "\n" +
		"    fflush(stdout);\n" +
		"    return 0;\n" +
		"}\n" +
		"// End of sandq's main.\n\n"
}

// cppRenameMain renames test's one main function to name and puts
// "return 0;" before the closing brace of its body.
func cppRenameMain(test, name string) (string, error) {
	code := goCode(test) // comments and literals blanked: C++ has the same
	locs := cppTestMain.FindAllStringIndex(code, -1)
	if len(locs) != 1 {
		return "", fmt.Errorf("its test defines %d main functions; want 1", len(locs))
	}
	open := strings.IndexByte(code[locs[0][1]:], '{')
	if open < 0 {
		return "", fmt.Errorf("its test's main has no body")
	}
	open += locs[0][1]
	depth, end := 0, -1
	for i := open; i < len(code) && end < 0; i++ {
		switch code[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return "", fmt.Errorf("its test's main does not end")
	}
	start := locs[0][0]
	return test[:start] + "int " + name + "(" + test[locs[0][1]:end] + "    return 0;\n" + test[end:], nil
}
