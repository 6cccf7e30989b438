package eval

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dataDir is the shared benchmark data, ../shared/data from the
// repository root. Tests that read it skip, saying so, only when the
// directory is absent (a checkout without shared/ beside it).
func dataDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "data")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("benchmark data not found at %s (../shared/data from the repository root); these tests read the real HumanEval files", dir)
	}
	return dir
}

func loadPack(t *testing.T, lang string) *Problems {
	t.Helper()
	ps, err := LoadProblems(filepath.Join(dataDir(t), "humanevalpack", lang+".jsonl.gz"))
	require.NoError(t, err)
	require.Len(t, ps.List, 164)
	return ps
}

func problem(t *testing.T, ps *Problems, id string) Problem {
	t.Helper()
	p, ok := ps.Get(id)
	require.True(t, ok, id)
	return p
}

// testNonce is the nonce of the programs the tests assemble (testMarker's).
const testNonce = "0123456789abcdef0123456789abcdef"

// assemble assembles with testNonce, so that programs can be compared.
func assemble(t *testing.T, p Problem, completion string) Program {
	t.Helper()
	prog, err := assembleWith(p, completion, testNonce)
	require.NoError(t, err)
	require.Equal(t, testMarker, prog.Marker)
	return prog
}

// Ends of programs with testMarker.
const (
	pythonEndText = "\n\n# Added by sandq's eval: the tests ran to the end.\n" +
		`__import__("sys").stdout.write("\n` + testMarker + `\n")` + "\n"
	jsEndText = "\n\n// Added by sandq's eval: the tests ran to the end.\n" +
		`;globalThis.process.stdout.write("\n` + testMarker + `\n")` + "\n"
)

func TestLoadHumanEval(t *testing.T) {
	t.Parallel()
	ps, err := LoadProblems(filepath.Join(dataDir(t), "humaneval", "HumanEval.jsonl.gz"))
	require.NoError(t, err)
	require.Equal(t, Python, ps.Lang)
	require.Equal(t, FlavorHumanEval, ps.Flavor)
	require.Len(t, ps.List, 164)
	require.Equal(t, "HumanEval/0", ps.List[0].TaskID)

	p := problem(t, ps, "HumanEval/0")
	prog := assemble(t, p, p.CanonicalSolution)
	require.Equal(t, Program{
		Lang: Python, File: "main.py",
		Code:   p.Prompt + p.CanonicalSolution + "\n" + p.Test + "\ncheck(has_close_elements)" + pythonEndText,
		Marker: testMarker,
	}, prog)
	require.Equal(t, p.CanonicalSolution, prog.Code[len(p.Prompt):len(p.Prompt)+len(p.CanonicalSolution)])
}

func TestAssemblePythonPack(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "python")
	require.Equal(t, FlavorPack, ps.Flavor)
	for _, p := range ps.List {
		// The recipe relies on every test calling its own check.
		require.Contains(t, p.Test, "check("+p.EntryPoint+")", p.TaskID)
	}
	p := problem(t, ps, "Python/0")
	prog := assemble(t, p, p.BuggySolution)
	want := "import math\nimport re\nimport sys\nimport copy\nimport datetime\nimport itertools\n" +
		"import collections\nimport heapq\nimport statistics\nimport functools\nimport hashlib\n" +
		"import numpy\nimport numpy as np\nimport string\nfrom typing import *\nfrom collections import *\n" +
		p.Prompt + p.BuggySolution + "\n" + p.Test + pythonEndText
	require.Equal(t, want, prog.Code)
	require.Empty(t, prog.Files)
}

func TestAssembleJavaScript(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "js")
	require.Equal(t, JavaScript, ps.Lang)
	p := problem(t, ps, "JavaScript/0")
	prog := assemble(t, p, p.CanonicalSolution)
	require.Equal(t, Program{Lang: JavaScript, File: "main.js", Code: p.Prompt + p.CanonicalSolution + "\n" + p.Test + jsEndText, Marker: testMarker}, prog)

	// Only JavaScript/162 needs a package, and it gets it whatever the
	// sample says.
	for _, p := range ps.List {
		prog := assemble(t, p, "")
		if p.TaskID == "JavaScript/162" {
			require.Equal(t, []string{"js-md5"}, prog.Libraries)
		} else {
			require.Empty(t, prog.Libraries, p.TaskID)
		}
	}
	require.Empty(t, jsPackages(`require('fs'); require("node:path"); require('./x')`))
	require.Equal(t, []string{"left-pad", "lodash"}, jsPackages(`require("lodash"); require('left-pad'); require('lodash')`))
}

func TestAssembleJava(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "java")
	p := problem(t, ps, "Java/0")
	prog := assemble(t, p, p.CanonicalSolution)
	require.Equal(t, "Main.java", prog.File)
	// The test's main is renamed; a new main, first in class Main, runs it
	// and then prints the marker.
	test := strings.Replace(p.Test, "public static void main(", "public static void sandqTestMain(", 1)
	test = strings.Replace(test, "public class Main {", "public class Main {"+javaMainText, 1)
	require.Equal(t, p.Prompt+p.CanonicalSolution+"\n"+test, prog.Code)
	for _, p := range ps.List {
		code := assemble(t, p, p.CanonicalSolution).Code
		require.Contains(t, code, "public class Main {"+javaMainText, p.TaskID)
		require.Equal(t, 1, strings.Count(code, "static void main("), p.TaskID)
		require.Equal(t, 1, strings.Count(code, "static void sandqTestMain("), p.TaskID)
	}
	// Java/162's main declares an exception; the new main's Throwable
	// covers it.
	require.Contains(t, assemble(t, problem(t, ps, "Java/162"), "").Code,
		"public static void sandqTestMain(String[] args) throws NoSuchAlgorithmException {")

	_, err := Assemble(Problem{TaskID: "Java/0", Prompt: "class Solution {", Test: "class Main {}", EntryPoint: "f"}, "}")
	require.ErrorContains(t, err, "eval: task Java/0: its test declares 0 main methods; want 1")
}

const javaMainText = "\n    // Added by sandq's eval: run the test's main, then say the tests ran to the end.\n" +
	"    public static void main(String[] args) throws Throwable {\n" +
	"        sandqTestMain(args);\n" +
	`        System.out.print("\n` + testMarker + `\n");` + "\n" +
	"        System.out.flush();\n" +
	"    }\n"

// cppMainText is the start of every C++ program with testNonce.
const cppMainText = "// Added by sandq's eval: main runs the test's main (renamed sandq_tests_" + testNonce + "),\n" +
	"// then says the tests ran to the end.\n" +
	"#include <stdio.h>\n" +
	"#include <iostream>\n" +
	"int sandq_tests_" + testNonce + "();\n" +
	"int main() {\n" +
	"    int status = sandq_tests_" + testNonce + "();\n" +
	"    if (status != 0) return status;\n" +
	"    std::cout.flush();\n" +
	`    fputs("\n` + testMarker + `\n", stdout);` + "\n" +
	"    fflush(stdout);\n" +
	"    return 0;\n" +
	"}\n" +
	"// End of sandq's main.\n\n"

func TestAssembleCPP(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "cpp")
	p := problem(t, ps, "CPP/0")
	// CPP/0's prompt includes stdio.h, vector and math.h.
	prog := assemble(t, p, p.CanonicalSolution)
	// The test's main is renamed after the nonce and returns 0 at its end;
	// the program's main, first in the file, runs it and prints the marker.
	test := strings.Replace(p.Test, "int main(){", "int sandq_tests_"+testNonce+"(){", 1)
	require.True(t, strings.HasSuffix(test, "\n    \n}\n"))
	test = strings.TrimSuffix(test, "}\n") + "    return 0;\n}\n"
	require.Equal(t, cppMainText+"#include<stdlib.h>\n#include<algorithm>\n#include<string>\n#include<climits>\n#include<cstring>\n#include<iostream>\n"+
		p.Prompt+p.CanonicalSolution+"\n"+test, prog.Code)

	// CPP/162 includes openssl/md5.h itself, and stdio.h and string.
	p = problem(t, ps, "CPP/162")
	prog = assemble(t, p, p.CanonicalSolution)
	head, _, _ := strings.Cut(prog.Code, p.Prompt)
	require.Equal(t, cppMainText+"#include<stdlib.h>\n#include<algorithm>\n#include<math.h>\n#include<vector>\n#include<climits>\n#include<cstring>\n#include<iostream>\n", head)
	require.Contains(t, prog.Code, "#include<openssl/md5.h>")

	// Every test has one main, whose body ends the test.
	for _, p := range ps.List {
		code := assemble(t, p, p.CanonicalSolution).Code
		require.Equal(t, 1, strings.Count(code, "int main("), p.TaskID)
		require.True(t, strings.HasSuffix(strings.TrimSpace(code), "    return 0;\n}"), p.TaskID)
	}
}

func TestCPPRenameMain(t *testing.T) {
	t.Parallel()
	// Braces in comments and literals do not count; main's own body ends
	// at its matching brace, and what follows it stays.
	got, err := cppRenameMain("bool f(){ return true; }\nint main (void) {\n  if (1) { puts(\"}\"); } // }\n  /* { */ char c = '{';\n}\nint after;\n", "t")
	require.NoError(t, err)
	require.Equal(t, "bool f(){ return true; }\nint t(void) {\n  if (1) { puts(\"}\"); } // }\n  /* { */ char c = '{';\n    return 0;\n}\nint after;\n", got)
	// A main whose body returns before the end keeps its return.
	got, err = cppRenameMain("int main(){ assert(1); return 0;}", "t")
	require.NoError(t, err)
	require.Equal(t, "int t(){ assert(1); return 0;    return 0;\n}", got)

	_, err = cppRenameMain("int f(){}", "t")
	require.ErrorContains(t, err, "defines 0 main functions")
	_, err = cppRenameMain("int main(){} int main(){}", "t")
	require.ErrorContains(t, err, "defines 2 main functions")
	_, err = cppRenameMain("int main(){ {", "t")
	require.ErrorContains(t, err, "does not end")
	// "int main(" in a comment is no main.
	_, err = cppRenameMain("// int main() {}\nint g(){}", "t")
	require.ErrorContains(t, err, "defines 0 main functions")
}

func TestAssembleGo(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "go")
	for _, tt := range []struct {
		task    string
		imports string
	}{
		// The prompt imports "math"; the solution uses it.
		{"Go/0", "\nimport (\n    \"math\"\n)\n"},
		// The prompt imports "strings" but nothing uses it.
		{"Go/27", ""},
		// "strings." appears only in a comment ("a list of strings.").
		{"Go/158", "\nimport (\n    \"sort\"\n)\n"},
		// test_setup imports crypto/md5 already; fmt is added.
		{"Go/162", "\nimport (\n    \"fmt\"\n)\n"},
	} {
		t.Run(strings.ReplaceAll(tt.task, "/", ""), func(t *testing.T) {
			t.Parallel()
			p := problem(t, ps, tt.task)
			prog := assemble(t, p, p.CanonicalSolution)
			prompt := strings.Replace(p.Prompt, p.Import, "", 1)
			require.NotContains(t, prompt, "import (")
			want := p.TestSetup + tt.imports + goHarnessImportsText + "\n" + prompt + p.CanonicalSolution + "\n" + p.Test
			require.True(t, strings.HasPrefix(prog.Code, want), prog.Code)
			// The tests run from main, as sandq's Go language builds and
			// runs a program, and the last to finish prints the marker.
			name := "Test" + p.EntryPoint
			require.Equal(t, goTestMainText(1)+
				"func main() {\n\ttesting.Main(func(pat, str string) (bool, error) { return true, nil },\n"+
				"\t\t[]testing.InternalTest{\n\t\t\t{Name: \""+name+"\", F: sandqEvalTest("+name+")},\n\t\t}, nil, nil)\n}\n", prog.Code[len(want):])
			require.Equal(t, "main.go", prog.File)
			require.Equal(t, []string{"go.mod", "go.sum"}, []string{prog.Files[0].Path, prog.Files[1].Path})
			require.Contains(t, string(prog.Files[0].ContentB64), "require github.com/stretchr/testify v1.8.0")
			require.Contains(t, string(prog.Files[1].ContentB64), "github.com/stretchr/testify v1.8.0 h1:")
		})
	}
	// Every prompt's import block is one the helpers cover, so removing it
	// loses nothing.
	for _, p := range ps.List {
		for _, line := range strings.Split(p.Import, "\n") {
			line = strings.Trim(strings.TrimSpace(strings.NewReplacer("import", "", "(", "", ")", "").Replace(line)), `"`)
			if line != "" {
				require.Contains(t, goHelperPackages, line, p.TaskID)
			}
		}
	}
}

const goHarnessImportsText = "\n// Added by sandq's eval, for its main below.\nimport (\n    sandqos \"os\"\n    sandqsync \"sync\"\n)\n"

// goTestMainText is the code before main that runs n tests and prints
// testMarker once all have passed.
func goTestMainText(n int) string {
	return "\n// Added by sandq's eval: run the tests as go test would, and once every\n" +
		"// test has finished and passed, say the tests ran to the end.\n" +
		"const sandqEvalTests = " + strconv.Itoa(n) + "\n\n" +
		"var sandqEvalEnd struct {\n\tmu               sandqsync.Mutex\n\tfinished, passed int\n}\n\n" +
		"func sandqEvalTest(test func(*testing.T)) func(*testing.T) {\n" +
		"\treturn func(t *testing.T) {\n" +
		"\t\treturned := false\n" +
		"\t\tt.Cleanup(func() {\n" +
		"\t\t\tsandqEvalEnd.mu.Lock()\n" +
		"\t\t\tdefer sandqEvalEnd.mu.Unlock()\n" +
		"\t\t\tsandqEvalEnd.finished++\n" +
		"\t\t\t// The cleanups of a test that panicked run before testing marks it failed.\n" +
		"\t\t\tif (returned || t.Skipped()) && !t.Failed() {\n" +
		"\t\t\t\tsandqEvalEnd.passed++\n" +
		"\t\t\t}\n" +
		"\t\t\tif sandqEvalEnd.finished == sandqEvalTests && sandqEvalEnd.passed == sandqEvalTests {\n" +
		"\t\t\t\tsandqos.Stdout.WriteString(\"\\n" + testMarker + "\\n\")\n" +
		"\t\t\t\tsandqos.Exit(0)\n" +
		"\t\t\t}\n" +
		"\t\t})\n" +
		"\t\ttest(t)\n" +
		"\t\treturned = true\n" +
		"\t}\n" +
		"}\n\n"
}

func TestAssembleGoRenamesTheSamplesMain(t *testing.T) {
	t.Parallel()
	p := Problem{TaskID: "Go/0", Prompt: "func F() int {\n", TestSetup: "package main\n\nimport (\n    \"testing\"\n)\n",
		Test: "func TestF(t *testing.T) {\n    if F() != 1 { t.Fail() }\n}\n// func TestNot(t *testing.T) {}\n"}
	prog := assemble(t, p, "    return 1\n}\n\nfunc main() {\n}\n")
	require.Equal(t, 1, strings.Count(prog.Code, "func main("))
	require.Contains(t, prog.Code, "func sandqSampleMain() {")
	require.Contains(t, prog.Code, `{Name: "TestF", F: sandqEvalTest(TestF)},`)
	require.NotContains(t, prog.Code, `sandqEvalTest(TestNot)`)
	require.Contains(t, prog.Code, "const sandqEvalTests = 1\n")

	// A test without Test functions could never pass.
	p.Test = "func testF(t *testing.T) {}\n"
	_, err := Assemble(p, "    return 1\n}\n")
	require.ErrorContains(t, err, "eval: task Go/0: its test has no Test function, so no sample could pass")
}

func TestGoCodeBlanksCommentsAndLiterals(t *testing.T) {
	t.Parallel()
	src := "x := \"strings.\" // fmt.Println\n/* sort.Ints\n*/ y := `time.Now` + 'a' + math.Pi"
	got := goCode(src)
	require.Len(t, got, len(src))
	require.Equal(t, 2, strings.Count(got, "\n"))
	require.True(t, goUses(got, "math"))
	for _, pkg := range []string{"strings", "fmt", "sort", "time"} {
		require.False(t, goUses(got, pkg), pkg)
	}
	require.False(t, goUses("mymath.Pi", "math"))
	require.False(t, goUses("x.math.Pi", "math"))
}

func TestAssembleRust(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "rust")
	p := problem(t, ps, "Rust/0")
	// The prompt carries fn main and the declaration's use lines; the
	// sample's main is renamed and a new one runs the test, which is no
	// longer compiled out.
	prog := assemble(t, p, p.CanonicalSolution)
	require.True(t, strings.HasPrefix(prog.Code, "#[allow(dead_code)]\nfn sandq_sample_main(){}\n\nuse std::"), prog.Code[:80])
	require.Contains(t, prog.Code, p.CanonicalSolution)
	require.NotContains(t, prog.Code, "#[cfg(test)]")
	require.NotContains(t, prog.Code, "#[test]")
	require.Contains(t, prog.Code, "pub fn test_has_close_elements()")
	require.True(t, strings.HasSuffix(prog.Code, "\n// Added by sandq's eval: run the tests as cargo test would, then say they\n"+
		"// ran to the end.\nfn main() {\n    tests::test_has_close_elements();\n"+rustEndText+"}\n"), prog.Code[len(prog.Code)-120:])
	require.Equal(t, 1, strings.Count(prog.Code, "fn main()"))
	// The tests use rand's API before 0.8.
	require.Equal(t, map[string]string{"SANDQ_RUST_RAND": "0.7"}, prog.Job().Env)

	// Comments between #[test] and fn (Rust/50); every test is called.
	p = problem(t, ps, "Rust/50")
	prog = assemble(t, p, p.CanonicalSolution)
	require.Contains(t, prog.Code, "\n    tests::test_decode_encode();\n")
	for _, p := range ps.List {
		prog := assemble(t, p, p.CanonicalSolution)
		require.NotContains(t, prog.Code, "#[test]", p.TaskID)
		require.Equal(t, 1, strings.Count(prog.Code, "\n    tests::"), p.TaskID)
	}

	// A bare body without the prompt gets the declaration's lines.
	bare := Problem{TaskID: "Rust/0", Prompt: "", Declaration: p.Declaration, Test: p.Test}
	prog = assemble(t, bare, "    true\n}\n")
	require.True(t, strings.HasPrefix(prog.Code, "#[allow(dead_code)]\nfn sandq_sample_main(){}\nuse std::"), prog.Code[:80])
	require.Equal(t, 1, strings.Count(prog.Code, "fn main()"))
}

const rustEndText = "    let mut sandq_out = ::std::io::stdout().lock();\n" +
	`    ::std::io::Write::write_all(&mut sandq_out, b"\n` + testMarker + `\n").unwrap();` + "\n" +
	"    ::std::io::Write::flush(&mut sandq_out).unwrap();\n"

func TestReferenceSamples(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "python")
	buggy, err := ReferenceSamples(ps, SamplesBuggy)
	require.NoError(t, err)
	require.Len(t, buggy, 164)
	require.Equal(t, ps.List[5].BuggySolution, buggy[5].Completion)

	he, err := LoadProblems(filepath.Join(dataDir(t), "humaneval", "HumanEval.jsonl.gz"))
	require.NoError(t, err)
	_, err = ReferenceSamples(he, SamplesBuggy)
	require.ErrorContains(t, err, "no buggy_solution")
}

func TestLoadSamples(t *testing.T) {
	t.Parallel()
	ps := &Problems{Lang: Python, Flavor: FlavorHumanEval, byTaskID: map[string]int{"HumanEval/0": 0}, List: []Problem{{TaskID: "HumanEval/0"}}}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	got, err := LoadSamples(write("ok.jsonl", `{"task_id": "HumanEval/0", "completion": "  return 1\n", "extra": 3}`+"\n\n"+`{"task_id": "HumanEval/0", "completion": ""}`), ps)
	require.NoError(t, err)
	require.Equal(t, []Sample{{TaskID: "HumanEval/0", Completion: "  return 1\n"}, {TaskID: "HumanEval/0"}}, got)

	_, err = LoadSamples(write("unknown.jsonl", `{"task_id": "HumanEval/0", "completion": ""}`+"\n"+`{"task_id": "HumanEval/9", "completion": ""}`), ps)
	require.ErrorContains(t, err, `line 2: task "HumanEval/9" is not in the problem file`)
	_, err = LoadSamples(write("nocompletion.jsonl", `{"task_id": "HumanEval/0"}`), ps)
	require.ErrorContains(t, err, "line 1: want")
}

func TestLoadProblemsRefusesMixedDatasets(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mixed.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(
		`{"task_id":"Python/0","prompt":"p","test":"t","entry_point":"f"}`+"\n"+
			`{"task_id":"Go/0","prompt":"p","test":"t","entry_point":"f","test_setup":"package main"}`+"\n"), 0o644))
	_, err := LoadProblems(path)
	require.ErrorContains(t, err, "line 2: task Go/0 is not of this file's dataset (humanevalpack python")
}
