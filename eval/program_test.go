package eval

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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

func assemble(t *testing.T, p Problem, completion string) Program {
	t.Helper()
	prog, err := Assemble(p, completion)
	require.NoError(t, err)
	return prog
}

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
		Code: p.Prompt + p.CanonicalSolution + "\n" + p.Test + "\ncheck(has_close_elements)",
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
		p.Prompt + p.BuggySolution + "\n" + p.Test
	require.Equal(t, want, prog.Code)
	require.Empty(t, prog.Files)
}

func TestAssembleJavaScript(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "js")
	require.Equal(t, JavaScript, ps.Lang)
	p := problem(t, ps, "JavaScript/0")
	prog := assemble(t, p, p.CanonicalSolution)
	require.Equal(t, Program{Lang: JavaScript, File: "main.js", Code: p.Prompt + p.CanonicalSolution + "\n" + p.Test}, prog)

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
	require.Equal(t, p.Prompt+p.CanonicalSolution+"\n"+p.Test, prog.Code)
	for _, p := range ps.List {
		require.Contains(t, assemble(t, p, p.CanonicalSolution).Code, "public class Main", p.TaskID)
	}
}

func TestAssembleCPP(t *testing.T) {
	t.Parallel()
	ps := loadPack(t, "cpp")
	p := problem(t, ps, "CPP/0")
	// CPP/0's prompt includes stdio.h, vector and math.h.
	prog := assemble(t, p, p.CanonicalSolution)
	require.Equal(t, "#include<stdlib.h>\n#include<algorithm>\n#include<string>\n#include<climits>\n#include<cstring>\n#include<iostream>\n"+
		p.Prompt+p.CanonicalSolution+"\n"+p.Test, prog.Code)

	// CPP/162 includes openssl/md5.h itself, and stdio.h and string.
	p = problem(t, ps, "CPP/162")
	prog = assemble(t, p, p.CanonicalSolution)
	head, _, _ := strings.Cut(prog.Code, p.Prompt)
	require.Equal(t, "#include<stdlib.h>\n#include<algorithm>\n#include<math.h>\n#include<vector>\n#include<climits>\n#include<cstring>\n#include<iostream>\n", head)
	require.Contains(t, prog.Code, "#include<openssl/md5.h>")
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
			want := p.TestSetup + tt.imports + "\n" + prompt + p.CanonicalSolution + "\n" + p.Test
			require.True(t, strings.HasPrefix(prog.Code, want), prog.Code)
			// The tests run from main, as sandq's Go language builds and
			// runs a program.
			name := "Test" + p.EntryPoint
			require.Equal(t, "\n// Added by sandq's eval: run the tests as go test would.\n"+
				"func main() {\n\ttesting.Main(func(pat, str string) (bool, error) { return true, nil },\n"+
				"\t\t[]testing.InternalTest{\n\t\t\t{Name: \""+name+"\", F: "+name+"},\n\t\t}, nil, nil)\n}\n", prog.Code[len(want):])
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

func TestAssembleGoRenamesTheSamplesMain(t *testing.T) {
	t.Parallel()
	p := Problem{TaskID: "Go/0", Prompt: "func F() int {\n", TestSetup: "package main\n\nimport (\n    \"testing\"\n)\n",
		Test: "func TestF(t *testing.T) {\n    if F() != 1 { t.Fail() }\n}\n// func TestNot(t *testing.T) {}\n"}
	prog := assemble(t, p, "    return 1\n}\n\nfunc main() {\n}\n")
	require.Equal(t, 1, strings.Count(prog.Code, "func main("))
	require.Contains(t, prog.Code, "func sandqSampleMain() {")
	require.Contains(t, prog.Code, `{Name: "TestF", F: TestF},`)
	require.NotContains(t, prog.Code, `TestNot, `)
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
	require.True(t, strings.HasSuffix(prog.Code, "\nfn main() {\n    tests::test_has_close_elements();\n}\n"), prog.Code[len(prog.Code)-120:])
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
	require.Equal(t, []Sample{{"HumanEval/0", "  return 1\n"}, {"HumanEval/0", ""}}, got)

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
