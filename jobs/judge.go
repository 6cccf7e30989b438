package jobs

import (
	"fmt"
	"math"
	"strings"
)

// Judge mode. A job with Tests is judged: its program is compiled once and
// run once per test case, each case in a fresh process with the case's
// standard input and limits (cpu_ms of CPU time, timeout_ms of wall time as
// a backstop, memory_mb, output_bytes), in a work dir the program cannot
// change (a case cannot leave files for the next). Each case's output is
// compared with its expected output ([JudgeSpec].Compare) or judged by a
// checker program ([Checker]), and the Result gets a verdict per case and
// one for the job ([Result].Verdict, Cases, Score). Interactive problems
// (a judge talking with the program while it runs) are not supported.

// TestCase is one case of a judged job.
type TestCase struct {
	// Name labels the case in the Result; optional.
	Name string `json:"name,omitempty"`

	// Stdin is the case's standard input, byte for byte.
	Stdin string `json:"stdin,omitempty"`

	// StdinKey reads the case's input from the tenant's inputs area of the
	// artifact store instead (like [File].Key); at most one of Stdin and
	// StdinKey.
	StdinKey string `json:"stdin_key,omitempty"`

	// ExpectedStdout is what the program must print, as [JudgeSpec].Compare
	// compares it; with a checker, the answer the checker gets.
	ExpectedStdout string `json:"expected_stdout,omitempty"`
}

// Compare names how a case's output is compared with its expected output.
type Compare string

const (
	// CompareExact: byte for byte.
	CompareExact Compare = "exact"
	// CompareLines: line by line, trailing whitespace of each line and
	// trailing empty lines ignored (the default; what most judges do).
	CompareLines Compare = "lines"
	// CompareTokens: the whitespace-separated tokens, in order.
	CompareTokens Compare = "tokens"
	// CompareFloat: tokens, numbers equal within AbsTol or RelTol, other
	// tokens exactly.
	CompareFloat Compare = "float"
)

// JudgeSpec says how a judged job's cases are judged.
type JudgeSpec struct {
	// Compare is the comparison of output with expected output: "exact",
	// "lines" (default), "tokens" or "float". Ignored with a Checker.
	Compare Compare `json:"compare,omitempty"`

	// AbsTol and RelTol are the float comparison's tolerances: a number
	// is accepted within either (|got-want| <= AbsTol, or <= RelTol x
	// |want|). Zero both: 1e-6 each.
	AbsTol float64 `json:"abs_tol,omitempty"`
	RelTol float64 `json:"rel_tol,omitempty"`

	// Checker judges each case instead of a comparison: for problems with
	// several valid answers.
	Checker *Checker `json:"checker,omitempty"`

	// StopOnFirstFailure ends the job at its first case not accepted (the
	// rest are "skipped"). Nil means true.
	StopOnFirstFailure *bool `json:"stop_on_first_failure,omitempty"`
}

// StopsOnFailure reports whether the job stops at its first failed case.
func (s *JudgeSpec) StopsOnFailure() bool {
	return s == nil || s.StopOnFirstFailure == nil || *s.StopOnFirstFailure
}

// Tolerances returns AbsTol and RelTol, defaulted.
func (s *JudgeSpec) Tolerances() (abs, rel float64) {
	if s == nil || (s.AbsTol == 0 && s.RelTol == 0) {
		return 1e-6, 1e-6
	}
	return s.AbsTol, s.RelTol
}

// Mode returns the comparison, defaulted.
func (s *JudgeSpec) Mode() Compare {
	if s == nil || s.Compare == "" {
		return CompareLines
	}
	return s.Compare
}

// Checker is a program that judges a case, in any sandq language, run in
// a container of its own (never the contestant's), compiled once per job.
// testlib's convention: it is run with three file arguments, the case's
// input, the contestant's output and the expected answer, and exits 0 to
// accept, 1 (wrong answer) or 2 (presentation error) to reject; any other
// exit, a crash or a timeout is checker_error, never the contestant's
// fault. What it prints is kept as the case's checker message.
type Checker struct {
	Lang string `json:"lang"`
	Code string `json:"code"`
}

// Verdict is a judged job's or case's verdict.
type Verdict string

const (
	VerdictAccepted     Verdict = "accepted"
	VerdictWrongAnswer  Verdict = "wrong_answer"
	VerdictTimeLimit    Verdict = "time_limit"
	VerdictMemoryLimit  Verdict = "memory_limit"
	VerdictRuntimeError Verdict = "runtime_error"
	VerdictOutputLimit  Verdict = "output_limit"
	VerdictCompileError Verdict = "compile_error"
	// VerdictCheckerError: the checker failed (crashed, timed out, exited
	// other than 0, 1 or 2, did not compile): the job's checker is at
	// fault, not the contestant.
	VerdictCheckerError Verdict = "checker_error"
	// VerdictSkipped: not run, after an earlier case failed
	// (stop_on_first_failure).
	VerdictSkipped Verdict = "skipped"
)

// Verdicts lists every verdict, for reports.
var Verdicts = []Verdict{VerdictAccepted, VerdictWrongAnswer, VerdictTimeLimit, VerdictMemoryLimit,
	VerdictRuntimeError, VerdictOutputLimit, VerdictCompileError, VerdictCheckerError, VerdictSkipped}

// Status is the job status a job verdict maps to: accepted is succeeded,
// time_limit timeout, memory_limit oom, output_limit output_limit,
// compile_error compile_error, every other failed.
func (v Verdict) Status() Status {
	switch v {
	case VerdictAccepted:
		return StatusSucceeded
	case VerdictTimeLimit:
		return StatusTimeout
	case VerdictMemoryLimit:
		return StatusOOM
	case VerdictOutputLimit:
		return StatusOutputLimit
	case VerdictCompileError:
		return StatusCompileError
	}
	return StatusFailed
}

// CaseResult is the outcome of one test case.
type CaseResult struct {
	Name    string  `json:"name,omitempty"`
	Verdict Verdict `json:"verdict"`

	// Detail says why, in words: the first difference of a wrong answer,
	// the CPU time against the limit, the exit status.
	Detail string `json:"detail,omitempty"`

	// CPUMS, WallMS and MaxRSSKB are what the case's process used.
	CPUMS    int64 `json:"cpu_ms"`
	WallMS   int64 `json:"wall_ms"`
	MaxRSSKB int64 `json:"max_rss_kb,omitempty"`

	// ExitCode is the program's exit code; nil if a signal ended it.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`

	// Stdout is the head of the program's output (at most 1 KiB) and
	// Expected the head of the expected output, for a case not accepted;
	// Stderr the head of its standard error.
	Stdout   string `json:"stdout,omitempty"`
	Expected string `json:"expected,omitempty"`
	Stderr   string `json:"stderr,omitempty"`

	// Checker is the head of what the checker printed.
	Checker string `json:"checker,omitempty"`

	// Rerun says the case was run a second time before its verdict: its
	// first run passed its CPU limit by a margin small enough for load to
	// explain, or was starved of CPU by the machine (wall time past the
	// backstop with CPU time under the limit). The verdict and usage are
	// the second run's.
	Rerun bool `json:"rerun,omitempty"`
}

// Provenance records what a judged job, or a job in an environment, ran
// on, so that a verdict can be reproduced and a suspect one explained.
type Provenance struct {
	// Image is the language image's ID (its content digest), Toolchain its
	// version when the worker knows it.
	Image     string `json:"image,omitempty"`
	Toolchain string `json:"toolchain,omitempty"`
	// Environment is the job's environment as it named it ("image:REF");
	// Image is then that image's ID. Empty: the language's own image.
	Environment string `json:"environment,omitempty"`
	// Recipe is the hash of the recipe the environment's image was built
	// from (Recipe.Hash), for an environment built by sandq.
	Recipe string `json:"recipe,omitempty"`
	// Limits are the case limits applied.
	Limits Limits `json:"limits"`
	// CPUModel is the worker's CPU; Worker the worker.
	CPUModel string `json:"cpu_model,omitempty"`
	Worker   string `json:"worker,omitempty"`
	// CPUShared reports that the run's CPU was shared: the machine's load
	// was above its CPUs while the cases ran, or the slot has no CPU of its
	// own.
	CPUShared bool `json:"cpu_shared"`
	// Load1 is the machine's one-minute load average when the cases
	// ended, and CPUs its CPU count.
	Load1 float64 `json:"load1"`
	CPUs  int     `json:"cpus"`
}

// MaxTestCases caps len(Job.Tests) under a policy that sets none.
const MaxTestCases = 1000

// validateTests checks a judged job's tests and judge spec.
func (p Policy) validateTests(j *Job) error {
	if len(j.Tests) == 0 {
		if j.Judge != nil {
			return invalid("judge", "is set without tests; a judged job needs tests")
		}
		return nil
	}
	if len(j.Tests) > p.MaxTests {
		return invalid("tests", "has %d cases; the cap is %d", len(j.Tests), p.MaxTests)
	}
	var total int64
	for i, tc := range j.Tests {
		field := fmt.Sprintf("tests[%d]", i)
		if tc.Stdin != "" && tc.StdinKey != "" {
			return invalid(field, "sets both stdin and stdin_key; set one")
		}
		if tc.StdinKey != "" {
			if len(tc.StdinKey) > maxKeyBytes {
				return invalid(field+".stdin_key", "is %d bytes; the cap is %d", len(tc.StdinKey), maxKeyBytes)
			}
			if msg := checkInputKey(tc.StdinKey); msg != "" {
				return invalid(field+".stdin_key", "%s", msg)
			}
		}
		if len(tc.Name) > maxTagValueBytes {
			return invalid(field+".name", "is %d bytes; the cap is %d", len(tc.Name), maxTagValueBytes)
		}
		total += int64(len(tc.Stdin) + len(tc.ExpectedStdout))
	}
	if total > p.MaxTestBytes {
		return invalid("tests", "inputs and expected outputs total %d bytes; the cap is %s", total, formatSize(p.MaxTestBytes))
	}
	s := j.Judge
	if s == nil {
		return nil
	}
	switch s.Compare {
	case "", CompareExact, CompareLines, CompareTokens, CompareFloat:
	default:
		return invalid("judge.compare", "unknown comparison %q; use exact, lines, tokens or float", s.Compare)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"abs_tol", s.AbsTol}, {"rel_tol", s.RelTol}} {
		if math.IsNaN(t.v) || math.IsInf(t.v, 0) || t.v < 0 || t.v >= 1 {
			return invalid("judge."+t.name, "is %v; must be >= 0 and < 1", t.v)
		}
	}
	if c := s.Checker; c != nil {
		if _, ok := p.lookupLang(c.Lang); !ok {
			return invalid("judge.checker.lang", "unknown language %q; supported: %s", c.Lang, strings.Join(p.langNames(), ", "))
		}
		if strings.TrimSpace(c.Code) == "" {
			return invalid("judge.checker.code", "is empty")
		}
		if n := int64(len(c.Code)); n > p.MaxCodeBytes {
			return invalid("judge.checker.code", "is %d bytes; the cap is %s", n, formatSize(p.MaxCodeBytes))
		}
	}
	return nil
}
