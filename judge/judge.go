// Package judge holds the rules of judge mode (jobs.Job.Tests): how a
// case's output is compared with its expected output, what verdict a
// case's run earns, when a time_limit is suspect enough to be run again,
// how a checker's exit maps to a verdict, and the job's verdict and score
// from its cases'. It does no I/O: the worker runs the cases and hands
// their outcomes here.
package judge

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sandq/sandq/jobs"
)

// Run is what one run of a case did, as the sandbox reports it.
type Run struct {
	// Started is false when the program could not be started.
	Started   bool
	ExitCode  int // -1 when a signal ended it
	Signal    int
	TimedOut  bool // the wall-time backstop killed it
	OOMKilled bool
	// OutOfMemory: the program failed with its runtime's out-of-memory
	// error (langs.Lang.MemoryErrors) before the sandbox killed it.
	OutOfMemory bool
	CPU, Wall   time.Duration
	MaxRSSKB    int64
	// Stdout is the program's output, whole unless Truncated (past
	// output_bytes).
	Stdout, Stderr []byte
	Truncated      bool
	// Error is the sandbox's message when the program did not start.
	Error string
	// Crashed: the program's runtime reported an uncaught error
	// (langs.Lang.CrashMarkers).
	Crashed bool
}

// Limits are a case's limits.
type Limits struct {
	CPU, Wall time.Duration
}

// RerunMargin is how far past its CPU limit a case may be and still be
// run again before it is time_limit: CPU time measured on a loaded
// machine runs high (shared caches, frequency scaling), by less than this.
const RerunMargin = 0.5

// Suspect reports whether a time_limit of run should be confirmed by a
// second run before it is reported: its CPU time passed the limit by less
// than RerunMargin, or the wall-time backstop killed it while its CPU time
// was under the limit (it was starved of CPU, not slow).
func Suspect(r Run, l Limits) bool {
	switch {
	case r.OOMKilled || r.OutOfMemory || !r.Started:
		return false
	case r.CPU > l.CPU:
		return float64(r.CPU) <= float64(l.CPU)*(1+RerunMargin)
	case r.TimedOut:
		return true
	}
	return false
}

// Case judges one run of a case against its expected output (spec's
// comparison), without a checker: the run's own failure first (time,
// memory, output, crash), then the output.
func Case(spec *jobs.JudgeSpec, tc jobs.TestCase, r Run, l Limits) jobs.CaseResult {
	res := Usage(tc, r)
	if v, detail, failed := RunVerdict(r, l); failed {
		res.Verdict, res.Detail = v, detail
		res.Stderr = Head(r.Stderr)
		return res
	}
	abs, rel := spec.Tolerances()
	if ok, detail := Compare(spec.Mode(), r.Stdout, []byte(tc.ExpectedStdout), abs, rel); !ok {
		res.Verdict, res.Detail = jobs.VerdictWrongAnswer, detail
		res.Stdout, res.Expected = Head(r.Stdout), Head([]byte(tc.ExpectedStdout))
		return res
	}
	res.Verdict = jobs.VerdictAccepted
	return res
}

// Usage is a CaseResult with run's usage and exit filled, no verdict.
func Usage(tc jobs.TestCase, r Run) jobs.CaseResult {
	res := jobs.CaseResult{Name: tc.Name, CPUMS: r.CPU.Milliseconds(), WallMS: r.Wall.Milliseconds(), MaxRSSKB: r.MaxRSSKB}
	if r.Started && r.Signal == 0 && r.ExitCode >= 0 && !r.TimedOut {
		code := r.ExitCode
		res.ExitCode = &code
	}
	if r.Signal != 0 {
		res.Signal = SignalName(r.Signal)
	}
	return res
}

// RunVerdict is the verdict a run earns by itself, before its output is
// looked at: failed is false when it exited 0 within its limits.
func RunVerdict(r Run, l Limits) (v jobs.Verdict, detail string, failed bool) {
	switch {
	case !r.Started:
		return jobs.VerdictRuntimeError, "the program could not start: " + r.Error, true
	case r.OOMKilled:
		return jobs.VerdictMemoryLimit, "killed for passing its memory limit", true
	case r.OutOfMemory:
		return jobs.VerdictMemoryLimit, "its runtime ran out of memory", true
	case r.CPU > l.CPU:
		return jobs.VerdictTimeLimit, fmt.Sprintf("CPU time %d ms over the limit of %d ms", r.CPU.Milliseconds(), l.CPU.Milliseconds()), true
	case r.TimedOut:
		return jobs.VerdictTimeLimit, fmt.Sprintf("wall time over the backstop of %d ms (CPU time %d ms)", l.Wall.Milliseconds(), r.CPU.Milliseconds()), true
	case r.Truncated:
		return jobs.VerdictOutputLimit, "output past output_bytes", true
	case r.Signal != 0:
		return jobs.VerdictRuntimeError, "killed by " + SignalName(r.Signal), true
	case r.ExitCode != 0:
		return jobs.VerdictRuntimeError, fmt.Sprintf("exit status %d", r.ExitCode), true
	}
	return "", "", false
}

// CheckerVerdict maps a checker's run to the case's verdict, testlib's
// way: exit 0 accepted, 1 (wrong answer) or 2 (presentation error)
// wrong_answer, anything else (another exit, a crash, a timeout, no start)
// checker_error.
func CheckerVerdict(r Run) (jobs.Verdict, string) {
	switch {
	case !r.Started:
		return jobs.VerdictCheckerError, "the checker could not start: " + r.Error
	case r.OOMKilled:
		return jobs.VerdictCheckerError, "the checker passed its memory limit"
	case r.TimedOut:
		return jobs.VerdictCheckerError, "the checker passed its time limit"
	case r.Signal != 0:
		return jobs.VerdictCheckerError, "the checker was killed by " + SignalName(r.Signal)
	case r.ExitCode == 0:
		return jobs.VerdictAccepted, ""
	case r.Crashed:
		return jobs.VerdictCheckerError, fmt.Sprintf("the checker crashed (exit %d, its runtime reported an uncaught error)", r.ExitCode)
	case r.ExitCode == 1, r.ExitCode == 2:
		return jobs.VerdictWrongAnswer, "rejected by the checker"
	}
	return jobs.VerdictCheckerError, fmt.Sprintf("the checker exited %d (0 accepts, 1 or 2 rejects)", r.ExitCode)
}

// Summarize returns a job's verdict and score from its cases': accepted
// when every case is, else the first case's that is not (skipped cases
// aside); the score is the share of cases accepted.
func Summarize(cases []jobs.CaseResult) (jobs.Verdict, float64) {
	if len(cases) == 0 {
		return jobs.VerdictAccepted, 1
	}
	v, passed := jobs.VerdictAccepted, 0
	for _, c := range cases {
		switch {
		case c.Verdict == jobs.VerdictAccepted:
			passed++
		case v == jobs.VerdictAccepted && c.Verdict != jobs.VerdictSkipped:
			v = c.Verdict
		}
	}
	return v, float64(passed) / float64(len(cases))
}

// Compare compares got with want by mode; detail says where they differ.
func Compare(mode jobs.Compare, got, want []byte, abs, rel float64) (ok bool, detail string) {
	switch mode {
	case jobs.CompareExact:
		if bytes.Equal(got, want) {
			return true, ""
		}
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return false, fmt.Sprintf("differs at byte %d", i)
	case jobs.CompareTokens, jobs.CompareFloat:
		g, w := bytes.Fields(got), bytes.Fields(want)
		for i := range min(len(g), len(w)) {
			if bytes.Equal(g[i], w[i]) {
				continue
			}
			if mode == jobs.CompareFloat && floatsClose(g[i], w[i], abs, rel) {
				continue
			}
			return false, fmt.Sprintf("token %d: expected %s, got %s", i+1, quote(w[i]), quote(g[i]))
		}
		if len(g) != len(w) {
			return false, fmt.Sprintf("%d tokens, expected %d", len(g), len(w))
		}
		return true, ""
	default: // lines
		g, w := lines(got), lines(want)
		for i := range min(len(g), len(w)) {
			if !bytes.Equal(g[i], w[i]) {
				return false, fmt.Sprintf("line %d: expected %s, got %s", i+1, quote(w[i]), quote(g[i]))
			}
		}
		if len(g) != len(w) {
			return false, fmt.Sprintf("%d lines, expected %d", len(g), len(w))
		}
		return true, ""
	}
}

// lines splits b into lines without their trailing whitespace (a "\r"
// included), trailing empty lines dropped.
func lines(b []byte) [][]byte {
	var out [][]byte
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		out = append(out, bytes.TrimRight(line, " \t\r\f\v"))
	}
	for len(out) > 0 && len(out[len(out)-1]) == 0 {
		out = out[:len(out)-1]
	}
	return out
}

func floatsClose(g, w []byte, abs, rel float64) bool {
	x, err1 := strconv.ParseFloat(string(g), 64)
	y, err2 := strconv.ParseFloat(string(w), 64)
	if err1 != nil || err2 != nil || math.IsNaN(x) || math.IsNaN(y) {
		return false
	}
	d := math.Abs(x - y)
	return d <= abs || d <= rel*math.Abs(y)
}

// quote shows a token or line: at most 64 bytes, quoted.
func quote(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "..."
	}
	return strconv.Quote(string(b))
}

// HeadBytes is how much of an output a CaseResult keeps.
const HeadBytes = 1 << 10

// Head is the first HeadBytes of b as valid UTF-8 (invalid bytes
// replaced).
func Head(b []byte) string {
	if len(b) > HeadBytes {
		b = b[:HeadBytes]
	}
	return string(bytes.ToValidUTF8(b, []byte(string(utf8.RuneError))))
}

var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
	7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS"}

// SignalName names signal n ("SIGSEGV"), or "signal n".
func SignalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return "signal " + strconv.Itoa(n)
}
