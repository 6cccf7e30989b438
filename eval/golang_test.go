package eval

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Go harness's main, built and run with the go command: the marker
// comes out only when every test has finished and none failed, whatever
// the way a test fails (t.Error, t.FailNow, a panic, in a subtest, in a
// parallel test) and however the tests are run (skipped, parallel,
// subtests); an early exit gets no marker. A test's cleanups run while
// its panic unwinds, before testing marks it failed: the harness must not
// count such a test as passed (the buggy solutions of Go/25, Go/47, Go/75
// and Go/156 panic).
func TestGoHarnessRunsEveryTestToTheEnd(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err, "the go command must be on PATH: the Go harness is built with it")
	setup := "package main\n\nimport (\n    \"testing\"\n)\n"
	for _, tt := range []struct {
		name, completion, test string
		// exit is the program's exit status; marker whether its stdout
		// ends with the marker.
		exit   int
		marker bool
	}{
		{"Pass", "", "func TestA(t *testing.T) {}\nfunc TestB(t *testing.T) {}\n", 0, true},
		{"Error", "", "func TestA(t *testing.T) { t.Error(\"x\") }\nfunc TestB(t *testing.T) {}\n", 1, false},
		{"FailNow", "", "func TestA(t *testing.T) {}\nfunc TestB(t *testing.T) { t.FailNow() }\n", 1, false},
		{"PanicInLastTest", "", "func TestA(t *testing.T) {}\nfunc TestB(t *testing.T) { var m map[int]int; m[F()] = 1 }\n", 2, false},
		{"PanicInFirstTest", "", "func TestA(t *testing.T) { panic(\"x\") }\nfunc TestB(t *testing.T) {}\n", 2, false},
		{"Skip", "", "func TestA(t *testing.T) { t.Skip(\"not here\") }\nfunc TestB(t *testing.T) {}\n", 0, true},
		{"Parallel", "", "func TestA(t *testing.T) { t.Parallel() }\nfunc TestB(t *testing.T) { t.Parallel() }\nfunc TestC(t *testing.T) {}\n", 0, true},
		{"ParallelFails", "", "func TestA(t *testing.T) { t.Parallel(); t.Error(\"x\") }\nfunc TestB(t *testing.T) {}\n", 1, false},
		{"ParallelSubtests", "", "func TestA(t *testing.T) {\n    t.Run(\"s\", func(t *testing.T) { t.Parallel() })\n    t.Run(\"r\", func(t *testing.T) { t.Parallel() })\n}\n", 0, true},
		{"ParallelSubtestFails", "", "func TestA(t *testing.T) { t.Run(\"s\", func(t *testing.T) { t.Parallel(); t.Error(\"x\") }) }\n", 1, false},
		{"SubtestPanics", "", "func TestA(t *testing.T) { t.Run(\"s\", func(t *testing.T) { panic(\"x\") }) }\n", 2, false},
		{"ExitInInit", "\nfunc init() { sandqos.Exit(0) }\n", "func TestA(t *testing.T) {}\n", 0, false},
		{"ExitInTheFunction", "", "func TestA(t *testing.T) { G() }\n", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := Problem{TaskID: "Go/0", Prompt: "func F() int {\n", TestSetup: setup, Test: tt.test}
			prog := assemble(t, p, "    return 1\n}\n\nfunc G() { sandqos.Exit(0) }\n"+tt.completion)
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog.Code), 0o644))
			// No module is needed here: the tests do not use testify.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module humaneval\n\ngo 1.21\n"), 0o644))
			build := exec.Command(goCmd, "build", "-o", "main", ".")
			build.Dir = dir
			build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
			out, err := build.CombinedOutput()
			require.NoError(t, err, "%s\n%s", out, prog.Code)
			run := exec.Command(filepath.Join(dir, "main"))
			var stdout, stderr bytes.Buffer
			run.Stdout, run.Stderr = &stdout, &stderr
			err = run.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.exit, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			require.Equal(t, tt.marker, ranToTheEnd(stdout.Bytes(), testMarker), "stdout:\n%s", stdout.String())
		})
	}
}
