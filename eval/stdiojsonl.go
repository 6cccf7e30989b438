package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// stdioLine is one problem of the stdio-jsonl format.
type stdioLine struct {
	TaskID    string          `json:"task_id"`
	Tests     []jobs.TestCase `json:"tests"`
	Judge     *jobs.JudgeSpec `json:"judge"`
	Limits    jobs.Limits     `json:"limits"`
	Solutions []Solution      `json:"solutions"`
}

// readStdioJSONL reads one problem of sandq's stdio-jsonl format (see
// [LoadStdioProblems]), strictly: an unknown field, at any depth, is an
// error, so that a misspelt "expected_output" is not an empty
// expectation.
func readStdioJSONL(b []byte) (StdioProblem, string, error) {
	var l stdioLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return StdioProblem{}, "", err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return StdioProblem{}, "", errors.New("more than one JSON value on the line")
	}
	if strings.TrimSpace(l.TaskID) == "" {
		return StdioProblem{}, "", errors.New(`a problem without a "task_id"`)
	}
	if len(l.Tests) == 0 {
		return StdioProblem{}, "", fmt.Errorf(`task %s: no tests (want "tests": [{"stdin", "expected_stdout"}])`, l.TaskID)
	}
	for i, s := range l.Solutions {
		if s.Lang == "" || strings.TrimSpace(s.Code) == "" {
			return StdioProblem{}, "", fmt.Errorf(`task %s: solution %d: want {"lang", "code"}`, l.TaskID, i+1)
		}
	}
	return StdioProblem{TaskID: l.TaskID, Tests: l.Tests, Judge: l.Judge, Limits: l.Limits, Solutions: l.Solutions}, "", nil
}
