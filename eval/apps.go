package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// appsLine is one problem of APPS; fields evaluation does not use
// (question, difficulty, url) are ignored. solutions and input_output are
// JSON encoded inside a string, as the dataset ships them; they are taken
// decoded too.
type appsLine struct {
	ProblemID   json.RawMessage `json:"problem_id"`
	Solutions   json.RawMessage `json:"solutions"`
	InputOutput json.RawMessage `json:"input_output"`
	StarterCode string          `json:"starter_code"`
}

// appsTests is APPS's input_output.
type appsTests struct {
	Inputs  []json.RawMessage `json:"inputs"`
	Outputs []json.RawMessage `json:"outputs"`
	FnName  string            `json:"fn_name"`
}

// appsLang is the language of APPS's solutions.
const appsLang = "python"

// readAPPS reads one APPS problem (see [LoadStdioProblems]).
func readAPPS(b []byte) (StdioProblem, string, error) {
	var l appsLine
	if err := json.Unmarshal(b, &l); err != nil {
		return StdioProblem{}, "", err
	}
	id, err := appsID(l.ProblemID)
	if err != nil {
		return StdioProblem{}, "", err
	}
	p := StdioProblem{TaskID: id}
	var solutions []string
	if err := decodeEmbedded(l.Solutions, &solutions); err != nil {
		return StdioProblem{}, "", fmt.Errorf("task %s: solutions: %w", id, err)
	}
	for _, s := range solutions {
		if strings.TrimSpace(s) != "" {
			p.Solutions = append(p.Solutions, Solution{Lang: appsLang, Code: s})
		}
	}
	var io appsTests
	if err := decodeEmbedded(l.InputOutput, &io); err != nil {
		return StdioProblem{}, "", fmt.Errorf("task %s: input_output: %w", id, err)
	}
	switch {
	case io.FnName != "":
		return p, fmt.Sprintf("call-based (fn_name %q): its tests call a function, not standard input and output", io.FnName), nil
	case len(io.Inputs) == 0:
		return p, "no tests (input_output is empty)", nil
	case len(io.Inputs) != len(io.Outputs):
		return p, fmt.Sprintf("%d inputs but %d outputs", len(io.Inputs), len(io.Outputs)), nil
	}
	for i := range io.Inputs {
		in, ok := appsText(io.Inputs[i])
		if !ok {
			return p, fmt.Sprintf("test %d: its input is neither a string nor a list of strings", i+1), nil
		}
		out, ok := appsText(io.Outputs[i])
		if !ok {
			return p, fmt.Sprintf("test %d: its output is neither a string nor a list of strings", i+1), nil
		}
		p.Tests = append(p.Tests, jobs.TestCase{Stdin: withFinalNewline(in), ExpectedStdout: out})
	}
	return p, "", nil
}

// appsID is a problem_id, a number or a string, as a task ID.
func appsID(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s != "" {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return string(n), nil
		}
	}
	if len(raw) == 0 {
		return "", errors.New(`a problem without a "problem_id"`)
	}
	return "", fmt.Errorf("problem_id %s: want an integer or a string", raw)
}

// decodeEmbedded decodes raw into v: raw is JSON inside a JSON string (as
// APPS ships it), or the value itself. Absent, null and "" leave v alone.
func decodeEmbedded(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		if strings.TrimSpace(s) == "" {
			return nil
		}
		raw = []byte(s)
	}
	return json.Unmarshal(raw, v)
}

// appsText is an input or output: a string, or a list of strings joined
// with "\n".
func appsText(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return strings.Join(list, "\n"), true
	}
	return "", false
}
