package eval

import (
	_ "embed"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// goHelperPackages may be imported by a Go program's assembly, when the
// code uses them (HumanEval-X's Go import helper).
var goHelperPackages = []string{
	"math", "strings", "fmt", "strconv", "time", "bytes", "regexp", "sort", "math/rand", "crypto/md5",
}

// The module the Go tests build in: "humaneval", requiring testify
// v1.8.0 as HumanEval-X does. The go.sum was made with the Go toolchain
// against the module proxy; the image needs these modules in its module
// cache, since the run has no network.
var (
	//go:embed gomod/go.mod.txt
	goMod []byte
	//go:embed gomod/go.sum.txt
	goSum []byte
)

// GoModuleFiles returns the go.mod and go.sum every Go program's job
// carries.
func GoModuleFiles() []jobs.File {
	return []jobs.File{
		{Path: "go.mod", ContentB64: append([]byte(nil), goMod...)},
		{Path: "go.sum", ContentB64: append([]byte(nil), goSum...)},
	}
}

// assembleGo removes the prompt's import block and builds the test file
// of the recipe: test_setup (package main, importing testing and testify's
// assert), an import block of the helper packages that the code uses
// outside comments and string literals and that test_setup does not
// import already, then prompt + completion + "\n" + test. Importing only
// used packages matters: Go refuses unused imports (Go/27's prompt imports
// "strings" and its solution does not use it).
//
// sandq's Go language builds main.go with `go build` and runs ./main, so
// the file is not main_test.go for `go test` but main.go with a main that
// runs the file's Test functions through testing.Main: the same tests,
// the same exit status (1 when a test failed). A main function of the
// sample's own is renamed, as go test would ignore it. Unlike go test, no
// vet checks run before the tests.
//
// testing.Main ends the process itself (os.Exit after printing PASS), so
// the end-of-tests marker is printed from the tests: each runs wrapped,
// and the cleanup of the last to finish, once every test has finished
// without failing, prints the marker and exits 0 (in place of PASS). Not
// if a test failed (testing.Main prints FAIL and exits 1) or panicked (a
// test's cleanups run while its panic unwinds, before testing marks it
// failed, so the wrapper counts a test as passed only if its function
// returned, or skipped it, and it has not failed), and not if the program
// exited first (os.Exit(0) in an init function of the sample's, which
// runs before main, or in the function under test). The added code
// imports os and sync under names of its own (sandqos, sandqsync), which
// cannot clash with the file's imports. A test without Test functions is
// an error: its samples could never pass.
func assembleGo(p Problem, completion, marker string) (Program, error) {
	if p.TestSetup == "" {
		return Program{}, fmt.Errorf("eval: task %s: a Go problem needs test_setup", p.TaskID)
	}
	prompt := p.Prompt
	if p.Import != "" {
		prompt = strings.Replace(prompt, p.Import, "", 1)
	}
	body := prompt + completion + "\n" + p.Test
	code := goCode(body)
	var imports []string
	for _, pkg := range goHelperPackages {
		if strings.Contains(p.TestSetup, `"`+pkg+`"`) {
			continue
		}
		if goUses(code, path.Base(pkg)) {
			imports = append(imports, pkg)
		}
	}
	if len(goTestFuncs(goCode(p.Test))) == 0 {
		return Program{}, fmt.Errorf("eval: task %s: its test has no Test function, so no sample could pass", p.TaskID)
	}
	var b strings.Builder
	b.WriteString(p.TestSetup)
	if !strings.HasSuffix(p.TestSetup, "\n") {
		b.WriteString("\n")
	}
	if len(imports) > 0 {
		b.WriteString("\nimport (\n")
		for _, pkg := range imports {
			fmt.Fprintf(&b, "    %q\n", pkg)
		}
		b.WriteString(")\n")
	}
	b.WriteString(goHarnessImports)
	b.WriteString("\n" + goUserMain.ReplaceAllString(body, "func sandqSampleMain("))
	b.WriteString(goTestMain(goTestFuncs(code), marker))
	return Program{Lang: Go, File: "main.go", Code: b.String(), Files: GoModuleFiles()}, nil
}

// goHarnessImports are the imports of the code goTestMain adds.
const goHarnessImports = "\n// Added by sandq's eval, for its main below.\nimport (\n    sandqos \"os\"\n    sandqsync \"sync\"\n)\n"

var (
	// goUserMain matches a main function defined by the sample.
	goUserMain = regexp.MustCompile(`(?m)^func main\(`)
	// goTestFunc matches a test function's declaration.
	goTestFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(\s*\w+\s+\*testing\.T\s*\)`)
)

// goTestFuncs returns the names of the Test functions declared in code
// (comments and literals blanked).
func goTestFuncs(code string) []string {
	var names []string
	for _, m := range goTestFunc.FindAllStringSubmatch(code, -1) {
		names = append(names, m[1])
	}
	return names
}

// goTestMain returns a main function that runs the tests with
// testing.Main, as the test binary go test builds would, each wrapped so
// that the last to finish prints the marker if none failed (see
// assembleGo).
func goTestMain(tests []string, marker string) string {
	var b strings.Builder
	b.WriteString("\n// Added by sandq's eval: run the tests as go test would, and once every\n" +
		"// test has finished and passed, say the tests ran to the end.\n")
	fmt.Fprintf(&b, "const sandqEvalTests = %d\n\n", len(tests))
	b.WriteString("var sandqEvalEnd struct {\n\tmu               sandqsync.Mutex\n\tfinished, passed int\n}\n\n")
	b.WriteString("func sandqEvalTest(test func(*testing.T)) func(*testing.T) {\n" +
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
		"\t\t\t\tsandqos.Stdout.WriteString(\"\\n" + marker + "\\n\")\n" +
		"\t\t\t\tsandqos.Exit(0)\n" +
		"\t\t\t}\n" +
		"\t\t})\n" +
		"\t\ttest(t)\n" +
		"\t\treturned = true\n" +
		"\t}\n" +
		"}\n\n")
	b.WriteString("func main() {\n\ttesting.Main(func(pat, str string) (bool, error) { return true, nil },\n\t\t[]testing.InternalTest{\n")
	for _, name := range tests {
		fmt.Fprintf(&b, "\t\t\t{Name: %q, F: sandqEvalTest(%s)},\n", name, name)
	}
	b.WriteString("\t\t}, nil, nil)\n}\n")
	return b.String()
}

// goUses reports whether code (with comments and literals blanked) refers
// to package name as "name.".
func goUses(code, name string) bool {
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_.])` + regexp.QuoteMeta(name) + `\s*\.`)
	return re.MatchString(code)
}

// goCode returns src with comments, string literals and rune literals
// replaced by spaces (newlines kept), so that only code remains to look
// for package references in.
func goCode(src string) string {
	b := []byte(src)
	out := make([]byte, len(b))
	copy(out, b)
	blank := func(from, to int) {
		for i := from; i < to && i < len(out); i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
	}
	for i := 0; i < len(b); {
		switch {
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			j := i
			for j < len(b) && b[j] != '\n' {
				j++
			}
			blank(i, j)
			i = j
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			j := strings.Index(src[i+2:], "*/")
			end := len(b)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			blank(i, end)
			i = end
		case b[i] == '`':
			j := strings.IndexByte(src[i+1:], '`')
			end := len(b)
			if j >= 0 {
				end = i + 1 + j + 1
			}
			blank(i, end)
			i = end
		case b[i] == '"' || b[i] == '\'':
			q, j := b[i], i+1
			for j < len(b) && b[j] != q && b[j] != '\n' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(b))
			blank(i, end)
			i = end
		default:
			i++
		}
	}
	return string(out)
}
