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
// the same exit status (0 when every test passed). A main function of the
// sample's own is renamed, as go test would ignore it. Unlike go test, no
// vet checks run before the tests.
func assembleGo(p Problem, completion string) (Program, error) {
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
	b.WriteString("\n" + goUserMain.ReplaceAllString(body, "func sandqSampleMain("))
	b.WriteString(goTestMain(code))
	return Program{Lang: Go, File: "main.go", Code: b.String(), Files: GoModuleFiles()}, nil
}

var (
	// goUserMain matches a main function defined by the sample.
	goUserMain = regexp.MustCompile(`(?m)^func main\(`)
	// goTestFunc matches a test function's declaration.
	goTestFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(\s*\w+\s+\*testing\.T\s*\)`)
)

// goTestMain returns a main function that runs the Test functions
// declared in code (comments and literals blanked) with testing.Main, as
// the test binary go test builds would.
func goTestMain(code string) string {
	var b strings.Builder
	b.WriteString("\n// Added by sandq's eval: run the tests as go test would.\n")
	b.WriteString("func main() {\n\ttesting.Main(func(pat, str string) (bool, error) { return true, nil },\n\t\t[]testing.InternalTest{\n")
	for _, m := range goTestFunc.FindAllStringSubmatch(code, -1) {
		fmt.Fprintf(&b, "\t\t\t{Name: %q, F: %s},\n", m[1], m[1])
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
