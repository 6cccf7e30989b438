package eval

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandq/sandq/jobs"
)

// codeContestsLine is one problem of CodeContests as ../shared/data
// packages it; fields evaluation does not use are ignored.
type codeContestsLine struct {
	ID        string `json:"id"`
	Solutions []struct {
		Language string `json:"language"`
		Code     string `json:"code"`
	} `json:"solutions"`
	Tests []struct {
		Stdin  *string `json:"stdin"`
		Stdout *string `json:"stdout"`
	} `json:"tests"`
	NeedsChecker bool `json:"heuristic_needs_checker"`
	// DeepMind's original layout, recognised to be refused clearly.
	PublicTests json.RawMessage `json:"public_tests"`
}

// readCodeContests reads one CodeContests problem (see
// [LoadStdioProblems]).
func readCodeContests(b []byte) (StdioProblem, string, error) {
	var l codeContestsLine
	if err := json.Unmarshal(b, &l); err != nil {
		return StdioProblem{}, "", err
	}
	if l.ID == "" {
		return StdioProblem{}, "", errors.New(`a problem without an "id"`)
	}
	if len(l.Tests) == 0 {
		if l.PublicTests != nil {
			return StdioProblem{}, "", fmt.Errorf(`task %s: no "tests": this reader takes CodeContests as ../shared/data packages it ("tests": [{"stdin", "stdout"}]), not DeepMind's public_tests/private_tests/generated_tests`, l.ID)
		}
		return StdioProblem{}, "", fmt.Errorf(`task %s: no tests (want "tests": [{"stdin", "stdout"}])`, l.ID)
	}
	p := StdioProblem{TaskID: l.ID, NeedsChecker: l.NeedsChecker, Tests: make([]jobs.TestCase, 0, len(l.Tests))}
	for i, tc := range l.Tests {
		if tc.Stdin == nil || tc.Stdout == nil {
			return StdioProblem{}, "", fmt.Errorf(`task %s: test %d: want {"stdin", "stdout"}`, l.ID, i+1)
		}
		// The packager stripped every input: judges feed a final newline.
		p.Tests = append(p.Tests, jobs.TestCase{Stdin: withFinalNewline(*tc.Stdin), ExpectedStdout: *tc.Stdout})
	}
	for i, s := range l.Solutions {
		if s.Language == "" || s.Code == "" {
			return StdioProblem{}, "", fmt.Errorf(`task %s: solution %d: want {"language", "code"}`, l.ID, i+1)
		}
		p.Solutions = append(p.Solutions, Solution{Lang: s.Language, Code: s.Code})
	}
	return p, "", nil
}
