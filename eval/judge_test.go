package eval

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// testMarker is the end-of-tests marker of the judge tests; end is a
// stdout that ends with it.
const (
	testMarker = "sandq-eval-end-0123456789abcdef0123456789abcdef"
	end        = "\n" + testMarker + "\n"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	exit := func(n int) *int { return &n }
	for _, tt := range []struct {
		name string
		lang Lang
		res  jobs.Result
		want Outcome
	}{
		{"Passed", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: end}},
			Outcome{Passed: true, Result: "passed"}},
		// The marker must be the last non-blank line: output before it
		// is fine, blank lines and spaces after it too, anything else
		// after it is not.
		{"PassedAfterOutput", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0),
			Output: jobs.Output{Stdout: "debug 1\ndebug 2 without newline" + end + "\n  \n"}}, Outcome{Passed: true, Result: "passed"}},
		{"PassedCRLF", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: testMarker + "\r\n"}},
			Outcome{Passed: true, Result: "passed"}},
		// A truncated stdout keeps its tail, which holds the marker.
		{"PassedTruncated", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0),
			Output: jobs.Output{Stdout: "xxxx\n[... 5000000 bytes dropped ...]\nxxxx" + end, StdoutTruncated: true, StdoutTotalBytes: 5000000}},
			Outcome{Passed: true, Result: "passed"}},
		// Exit 0 without the marker: the program ended before its tests
		// did (os._exit(0) in the completion).
		{"ExitedEarly", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0)},
			Outcome{Result: "failed: tests did not run to the end"}},
		{"ExitedEarlyWithOutput", Go, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: "hello\n"}},
			Outcome{Result: "failed: tests did not run to the end"}},
		{"MarkerNotLast", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: end + "more\n"}},
			Outcome{Result: "failed: tests did not run to the end"}},
		{"MarkerNotOnItsOwnLine", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: "x" + testMarker + "\n"}},
			Outcome{Result: "failed: tests did not run to the end"}},
		{"AnotherMarker", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0),
			Output: jobs.Output{Stdout: "\nsandq-eval-end-00000000000000000000000000000000\n"}}, Outcome{Result: "failed: tests did not run to the end"}},
		{"MarkerPrefixOnly", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: testMarker[:30] + "\n"}},
			Outcome{Result: "failed: tests did not run to the end"}},
		// Stdout that is not UTF-8 travels as base64: decoded, it ends
		// with the marker.
		{"PassedBase64", Python, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0),
			Output: jobs.Output{Stdout: base64.StdEncoding.EncodeToString([]byte("\xff\xfe" + end)), StdoutEncoding: jobs.EncodingBase64}},
			Outcome{Passed: true, Result: "passed"}},
		{"PythonAssertion", Python, jobs.Result{Status: jobs.StatusFailed, ExitCode: exit(1),
			Output: jobs.Output{Stderr: "Traceback (most recent call last):\n  File \"main.py\", line 9\nAssertionError\n"}},
			Outcome{Result: "failed: AssertionError"}},
		{"PythonNameError", Python, jobs.Result{Status: jobs.StatusFailed, ExitCode: exit(1),
			Output: jobs.Output{Stderr: "Traceback...\nNameError: name 'x' is not defined\n"}},
			Outcome{Result: "failed: NameError: name 'x' is not defined"}},
		{"Timeout", Python, jobs.Result{Status: jobs.StatusTimeout, Reason: "wall-clock limit"}, Outcome{Result: "timed out"}},
		// console.assert prints and exits 0.
		{"JSAssertion", JavaScript, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0),
			Output: jobs.Output{Stderr: "Assertion failed\nAssertion failed\n"}}, Outcome{Result: "failed: Assertion failed"}},
		{"JSAssertionAndMarker", JavaScript, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0),
			Output: jobs.Output{Stdout: end, Stderr: "Assertion failed\n"}}, Outcome{Result: "failed: Assertion failed"}},
		{"JSPassed", JavaScript, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: end}},
			Outcome{Passed: true, Result: "passed"}},
		{"JSExitedEarly", JavaScript, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0)},
			Outcome{Result: "failed: tests did not run to the end"}},
		// Other languages may write to stderr and pass.
		{"GoStderr", Go, jobs.Result{Status: jobs.StatusSucceeded, ExitCode: exit(0), Output: jobs.Output{Stdout: end, Stderr: "go: downloading\n"}},
			Outcome{Passed: true, Result: "passed"}},
		{"JavaException", Java, jobs.Result{Status: jobs.StatusFailed, ExitCode: exit(1),
			Output: jobs.Output{Stderr: "Exception in thread \"main\" java.lang.AssertionError\n\tat Main.main(Main.java:40)\n"}},
			Outcome{Result: "failed: Exception in thread \"main\" java.lang.AssertionError"}},
		{"NodeMissingModule", JavaScript, jobs.Result{Status: jobs.StatusFailed, ExitCode: exit(1),
			Output: jobs.Output{Stderr: "node:internal/modules/cjs/loader:1143\n  throw err;\n  ^\n\nError: Cannot find module 'js-md5'\nRequire stack:\n"}},
			Outcome{Result: "failed: Error: Cannot find module 'js-md5'"}},
		{"GoTestFailOnStdout", Go, jobs.Result{Status: jobs.StatusFailed, ExitCode: exit(1),
			Output: jobs.Output{Stdout: "--- FAIL: TestX (0.00s)\n"}}, Outcome{Result: "failed: --- FAIL: TestX (0.00s)"}},
		{"RustPanic", Rust, jobs.Result{Status: jobs.StatusFailed, Signal: "SIGABRT", Reason: "killed by SIGABRT",
			Output: jobs.Output{Stderr: "thread 'main' panicked at main.rs:40:9:\nassertion failed: poly(&coeffs, solution).abs() < 1e-3\nnote: run with `RUST_BACKTRACE=1`\n"}},
			Outcome{Result: "failed: assertion failed: poly(&coeffs, solution).abs() < 1e-3"}},
		{"Signal", CPP, jobs.Result{Status: jobs.StatusFailed, Signal: "SIGABRT", Reason: "killed by SIGABRT"},
			Outcome{Result: "failed: killed by SIGABRT"}},
		// The test's main, renamed after the nonce, is named without it.
		{"CPPAssert", CPP, jobs.Result{Status: jobs.StatusFailed, Signal: "SIGABRT", Reason: "killed by SIGABRT",
			Output: jobs.Output{Stderr: "main: main.cpp:51: int sandq_tests_" + testNonce + "(): Assertion `f(a) == false' failed.\n"}},
			Outcome{Result: "failed: main: main.cpp:51: int sandq_tests(): Assertion `f(a) == false' failed."}},
		{"CompileError", CPP, jobs.Result{Status: jobs.StatusCompileError, Reason: "compilation failed",
			Compile: &jobs.StepResult{Output: jobs.Output{Stderr: "main.cpp:3:1: error: 'x' was not declared\n"}}},
			Outcome{Result: "failed: compilation error: main.cpp:3:1: error: 'x' was not declared"}},
		{"OOM", Python, jobs.Result{Status: jobs.StatusOOM, Reason: "killed by the OOM killer (memory limit 256 MiB)"},
			Outcome{Result: "failed: killed by the OOM killer (memory limit 256 MiB)"}},
		{"Rejected", Python, jobs.Result{Status: jobs.StatusRejected, Reason: "code: over 1 MiB"}, Outcome{Result: "failed: rejected: code: over 1 MiB"}},
		{"InternalError", Python, jobs.Result{Status: jobs.StatusInternalError, Reason: "engine gone"},
			Outcome{Result: "internal_error: engine gone", Excluded: true}},
		{"Canceled", Python, jobs.Result{Status: jobs.StatusCanceled, Reason: "canceled while queued"},
			Outcome{Result: "canceled: canceled while queued", Excluded: true}},
		{"NotFinal", Python, jobs.Result{Status: jobs.StatusRunning}, Outcome{Result: "running", Excluded: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Judge(tt.lang, testMarker, tt.res))
		})
	}
}

// Without a marker to look for, no run passes.
func TestJudgeWithoutMarkerFails(t *testing.T) {
	t.Parallel()
	r := jobs.Result{Status: jobs.StatusSucceeded, Output: jobs.Output{Stdout: "\n\n"}}
	require.Equal(t, Outcome{Result: "failed: tests did not run to the end"}, Judge(Python, "", r))
	r.Stdout = end
	require.Equal(t, Outcome{Result: "failed: tests did not run to the end"}, Judge(Python, "", r))
}

func TestJudgeClipsLongMessages(t *testing.T) {
	t.Parallel()
	got := Judge(Python, testMarker, jobs.Result{Status: jobs.StatusFailed, Output: jobs.Output{Stderr: "ValueError: " + strings.Repeat("é", 300)}})
	require.LessOrEqual(t, len(got.Result), len("failed: ")+maxDetail+len("…"))
	require.True(t, strings.HasSuffix(got.Result, "…"))
}
