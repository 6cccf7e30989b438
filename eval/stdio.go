package eval

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// Format names a problem file's format.
type Format string

const (
	// FormatHumanEval is OpenAI's HumanEval or one language of
	// HumanEvalPack: a completion is assembled with the problem's tests
	// into one program (see [Problems]).
	FormatHumanEval Format = "humaneval"
	// FormatCodeContests is DeepMind's CodeContests as packaged in
	// ../shared/data/codecontests (see [LoadStdioProblems]).
	FormatCodeContests Format = "codecontests"
	// FormatAPPS is the APPS dataset's JSON lines.
	FormatAPPS Format = "apps"
	// FormatStdioJSONL is sandq's own format of problems judged by
	// standard input and output (see [LoadStdioProblems]).
	FormatStdioJSONL Format = "stdio-jsonl"
)

// Formats lists the formats, HumanEval's first.
func Formats() []Format {
	return []Format{FormatHumanEval, FormatCodeContests, FormatAPPS, FormatStdioJSONL}
}

// ParseFormat accepts a format's name, case-insensitively.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats() {
		if strings.EqualFold(strings.TrimSpace(s), string(f)) {
			return f, nil
		}
	}
	return "", fmt.Errorf("eval: unknown format %q (want humaneval, codecontests, apps or stdio-jsonl)", s)
}

// Judged reports whether problems of format f are judged by test cases
// (standard input and expected output) rather than assembled with tests
// into one program.
func (f Format) Judged() bool { return f != FormatHumanEval }

// Solution is a reference solution of a problem: a whole program.
type Solution struct {
	// Lang is the program's language, as the dataset names it ("python3");
	// sandq's language aliases resolve it when the job is enqueued.
	Lang string `json:"lang"`
	Code string `json:"code"`
}

// StdioProblem is a problem judged by standard input and expected standard
// output: a sample is a whole program, run as a judged job
// ([jobs.Job].Tests) on the problem's tests.
type StdioProblem struct {
	TaskID string
	// Tests are the problem's cases, in the dataset's order.
	Tests []jobs.TestCase
	// Judge is the problem's own judge spec (a comparison, a checker);
	// nil leaves it to [JudgeDefaults].
	Judge *jobs.JudgeSpec
	// Limits are the problem's own limits; zero fields are left to
	// [JudgeDefaults].
	Limits jobs.Limits
	// Solutions are the dataset's reference solutions.
	Solutions []Solution
	// NeedsChecker marks a problem the dataset flags as having several
	// valid answers or a float tolerance (CodeContests'
	// heuristic_needs_checker) while giving no checker: a wrong_answer
	// there may be another valid answer.
	NeedsChecker bool
}

// SkippedProblem is a problem of a file that cannot be evaluated here,
// and why. It is counted in the summary, never dropped silently.
type SkippedProblem struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}

// StdioProblems is a loaded file of problems judged by standard input and
// output: the problems to evaluate in file order, and those skipped.
type StdioProblems struct {
	Format  Format
	List    []StdioProblem
	Skipped []SkippedProblem
	// byTaskID maps a task ID to its index in List, or to -1-i for
	// Skipped[i].
	byTaskID map[string]int
}

// Get returns the problem with task ID id, if it is to be evaluated.
func (ps *StdioProblems) Get(id string) (StdioProblem, bool) {
	i, ok := ps.byTaskID[id]
	if !ok || i < 0 {
		return StdioProblem{}, false
	}
	return ps.List[i], true
}

// SkipReason returns why the problem with task ID id is skipped, if it is.
func (ps *StdioProblems) SkipReason(id string) (string, bool) {
	i, ok := ps.byTaskID[id]
	if !ok || i >= 0 {
		return "", false
	}
	return ps.Skipped[-1-i].Reason, true
}

// add records p, or its skip when reason is not empty; a task ID seen
// before is an error.
func (ps *StdioProblems) add(p StdioProblem, reason string) error {
	if p.TaskID == "" {
		return fmt.Errorf("a problem without a task ID")
	}
	if _, dup := ps.byTaskID[p.TaskID]; dup {
		return fmt.Errorf("task %s appears twice", p.TaskID)
	}
	if reason != "" {
		ps.Skipped = append(ps.Skipped, SkippedProblem{TaskID: p.TaskID, Reason: reason})
		ps.byTaskID[p.TaskID] = -len(ps.Skipped)
		return nil
	}
	ps.byTaskID[p.TaskID] = len(ps.List)
	ps.List = append(ps.List, p)
	return nil
}

// SkipNeedsChecker moves the problems flagged [StdioProblem].NeedsChecker
// that have no checker to Skipped, and returns how many it moved.
func (ps *StdioProblems) SkipNeedsChecker() int {
	list, moved := ps.List[:0:0], 0
	for _, p := range ps.List {
		if p.NeedsChecker && (p.Judge == nil || p.Judge.Checker == nil) {
			ps.Skipped = append(ps.Skipped, SkippedProblem{TaskID: p.TaskID,
				Reason: "flagged as needing a checker (several valid answers or a float tolerance), and has none"})
			moved++
			continue
		}
		list = append(list, p)
	}
	ps.List = list
	ps.reindex()
	return moved
}

func (ps *StdioProblems) reindex() {
	ps.byTaskID = make(map[string]int, len(ps.List)+len(ps.Skipped))
	for i, p := range ps.List {
		ps.byTaskID[p.TaskID] = i
	}
	for i, s := range ps.Skipped {
		ps.byTaskID[s.TaskID] = -1 - i
	}
}

// LoadStdioProblems reads a problem file of a judged format (JSON lines,
// gzip-compressed or not, told by the gzip magic number):
//
//   - codecontests: {"id", "solutions": [{"language", "code"}], "tests":
//     [{"stdin", "stdout"}], "heuristic_needs_checker", ...}, the task ID
//     being "id". Every input lacks its final newline (the packager
//     stripped them), so one is appended to an input that does not end
//     with one, as judges feed input; outputs are compared by the default
//     "lines" comparison, which ignores trailing whitespace.
//   - apps: {"problem_id", "question", "solutions" (a JSON-encoded list of
//     programs), "input_output" (a JSON-encoded {"inputs", "outputs",
//     "fn_name"?}), "starter_code", "difficulty"}, the task ID being the
//     problem ID in decimal. An input or output that is a list of strings
//     is joined with "\n"; an input gets a final newline as above.
//     Call-based problems (fn_name) are not standard-input problems: they
//     are skipped, with the reason, as are problems without tests.
//   - stdio-jsonl: sandq's own format, one problem a line, decoded
//     strictly (an unknown field is an error): {"task_id", "tests":
//     [{"name"?, "stdin" or "stdin_key", "expected_stdout"}], "judge"?
//     (a [jobs.JudgeSpec], checker included), "limits"? (a [jobs.Limits]),
//     "solutions"? [{"lang", "code"}]}. Inputs are taken byte for byte.
//
// Task IDs must be unique. A file with nothing to evaluate (no problem,
// or every problem skipped) is an error.
func LoadStdioProblems(format Format, path string) (*StdioProblems, error) {
	var read func([]byte) (StdioProblem, string, error)
	switch format {
	case FormatCodeContests:
		read = readCodeContests
	case FormatAPPS:
		read = readAPPS
	case FormatStdioJSONL:
		read = readStdioJSONL
	default:
		return nil, fmt.Errorf("eval: problems %s: %q is not a judged format (want codecontests, apps or stdio-jsonl)", path, format)
	}
	ps := &StdioProblems{Format: format, byTaskID: map[string]int{}}
	err := readJSONL(path, func(_ int, b []byte) error {
		p, skip, err := read(b)
		if err != nil {
			return err
		}
		return ps.add(p, skip)
	})
	if err != nil {
		return nil, fmt.Errorf("eval: %s problems %s: %w", format, path, err)
	}
	switch {
	case len(ps.List) == 0 && len(ps.Skipped) == 0:
		return nil, fmt.Errorf("eval: %s problems %s: no problems", format, path)
	case len(ps.List) == 0:
		s := ps.Skipped[0]
		return nil, fmt.Errorf("eval: %s problems %s: all %d problems are skipped, none can be evaluated (the first, %s: %s)",
			format, path, len(ps.Skipped), s.TaskID, s.Reason)
	}
	return ps, nil
}

// withFinalNewline returns an input that ends with a newline, as judges
// feed one: s itself if it is empty or ends with "\n".
func withFinalNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// References returns one sample per reference solution of every problem
// to evaluate, in problem order, each in its solution's language: every
// sample should be accepted. Problems without solutions get none (the
// summary lists them as unattempted).
func (ps *StdioProblems) References() []Sample {
	var out []Sample
	for _, p := range ps.List {
		for _, s := range p.Solutions {
			out = append(out, Sample{TaskID: p.TaskID, Completion: s.Code, Lang: s.Lang})
		}
	}
	return out
}

// SamplesReferences names the reference sample set of judged formats,
// usable in place of a samples file: each problem's own solutions.
const SamplesReferences = "references"

// JudgeDefaults are what a judged job takes where its problem and its
// sample say nothing. The problem's own judge spec and limits win over
// them field by field.
type JudgeDefaults struct {
	// Lang is the language of a sample without one. Empty: such a sample
	// is an error when samples are loaded.
	Lang string
	// Limits fill the limits a problem leaves zero (cpu_ms, timeout_ms,
	// memory_mb, ...). Zero: the worker's defaults.
	Limits jobs.Limits
	// Compare is the comparison of a problem without its own comparison
	// or checker. Empty: "lines".
	Compare jobs.Compare
	// AllCases runs every case of a problem that does not say, instead of
	// stopping at the first failure, for a meaningful score. Default
	// false: stop at the first failed case.
	AllCases bool
}

// Job returns the judged job that runs sample s, a whole program, on p's
// tests: s's code in s's language (or d.Lang), p's tests, p's judge spec
// and limits filled from d. The caller sets the ID, queue and tags.
func (p StdioProblem) Job(s Sample, d JudgeDefaults) jobs.Job {
	j := jobs.Job{
		Lang:   cmp.Or(s.Lang, d.Lang),
		Code:   s.Completion,
		Tests:  p.Tests,
		Limits: p.Limits,
	}
	for _, l := range jobs.LimitTable {
		if l.Get(&j.Limits) == 0 {
			l.Set(&j.Limits, l.Get(&d.Limits))
		}
	}
	var spec jobs.JudgeSpec
	if p.Judge != nil {
		spec = *p.Judge
	}
	if spec.Compare == "" && spec.Checker == nil {
		spec.Compare = d.Compare
	}
	if spec.StopOnFirstFailure == nil && d.AllCases {
		stop := false
		spec.StopOnFirstFailure = &stop
	}
	if spec != (jobs.JudgeSpec{}) {
		j.Judge = &spec
	}
	return j
}
