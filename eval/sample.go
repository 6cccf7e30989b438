package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Sample is one completion of one task, in the human-eval format
// ({"task_id": ..., "completion": ...}). Other fields of a sample line are
// ignored, but for a judged format's "lang".
type Sample struct {
	TaskID     string `json:"task_id"`
	Completion string `json:"completion"`
	// Lang is the language of a judged format's sample, whose completion
	// is a whole program; empty for HumanEval, whose language is the
	// problem file's.
	Lang string `json:"lang,omitempty"`
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
	return loadSamples(path, false, func(s *Sample, _ *string) error {
		if _, ok := ps.Get(s.TaskID); !ok {
			return fmt.Errorf("task %q is not in the problem file", s.TaskID)
		}
		return nil
	})
}

// LoadStdioSamples reads a samples file of a judged format: lines
// {"task_id", "completion", "lang"?}, the completion a whole program in
// lang, or in defaultLang when the line has none (a line with neither is
// an error). Every sample's task must be in ps; samples of a problem ps
// skips are not returned but counted in skipped, so that the summary
// tells them.
func LoadStdioSamples(path string, ps *StdioProblems, defaultLang string) (samples []Sample, skipped int, err error) {
	all, err := loadSamples(path, true, func(s *Sample, lang *string) error {
		if lang != nil {
			if strings.TrimSpace(*lang) == "" {
				return errors.New(`"lang" is empty`)
			}
			s.Lang = *lang
		}
		if _, ok := ps.Get(s.TaskID); ok {
			if s.Lang == "" && defaultLang == "" {
				return fmt.Errorf(`task %s: the sample has no "lang" and no default language was given (enqueue eval --lang)`, s.TaskID)
			}
			return nil
		}
		if _, ok := ps.SkipReason(s.TaskID); ok {
			return nil
		}
		return fmt.Errorf("task %q is not in the problem file", s.TaskID)
	})
	if err != nil {
		return nil, 0, err
	}
	for _, s := range all {
		if _, ok := ps.Get(s.TaskID); ok {
			samples = append(samples, s)
		} else {
			skipped++
		}
	}
	return samples, skipped, nil
}

// loadSamples reads a samples file, checking each sample with check,
// which also gets the line's "lang" when withLang (nil when absent;
// without withLang, "lang" is ignored like any other field). A file
// without samples is an error.
func loadSamples(path string, withLang bool, check func(s *Sample, lang *string) error) ([]Sample, error) {
	var out []Sample
	err := readJSONL(path, func(_ int, b []byte) error {
		var raw struct {
			TaskID     *string `json:"task_id"`
			Completion *string `json:"completion"`
		}
		var lang struct {
			Lang *string `json:"lang"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			return err
		}
		if withLang {
			if err := json.Unmarshal(b, &lang); err != nil {
				return err
			}
		}
		if raw.TaskID == nil || raw.Completion == nil {
			return fmt.Errorf(`want {"task_id": ..., "completion": ...}`)
		}
		s := Sample{TaskID: *raw.TaskID, Completion: *raw.Completion}
		if err := check(&s, lang.Lang); err != nil {
			return err
		}
		out = append(out, s)
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
