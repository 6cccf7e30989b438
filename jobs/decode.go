package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// DecodeJob decodes one Job from JSON, strictly: one JSON object, no
// unknown fields (a misspelt field is an error, not silently dropped) and
// nothing after it. It does not validate the job ([Policy.Validate] does).
// Every reader of job JSON uses it: the worker's task decoder, the CLI's
// --job-json and batch lines.
func DecodeJob(payload []byte) (Job, error) {
	if b := bytes.TrimSpace(payload); len(b) == 0 || b[0] != '{' {
		return Job{}, errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return Job{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Job{}, errors.New("unexpected data after the JSON object")
	}
	return j, nil
}
