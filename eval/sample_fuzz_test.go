package eval

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzLoadSamples: a samples file (JSON lines, maybe gzipped) given to
// sandq-eval, whose completions become programs run in the sandbox.
//   - LoadSamples agrees with a reference reading of the format: each
//     non-blank line one JSON object with a string task_id of a known
//     problem and a string completion (other fields ignored, keys matched
//     as encoding/json matches them), samples in file order; any other line
//     fails the whole file, as does a file with no samples.
//   - Samples are valid UTF-8 (they become source files) and of known
//     tasks.
//   - Gzip is transparent: the same file gzipped loads to the same
//     samples, or fails as well.
func FuzzLoadSamples(f *testing.F) {
	dir := f.TempDir()
	problems := filepath.Join(dir, "problems.jsonl")
	var pf bytes.Buffer
	for _, id := range []string{"HumanEval/0", "HumanEval/1", "HumanEval/../0"} {
		_ = json.NewEncoder(&pf).Encode(Problem{TaskID: id, Prompt: "def f():\n", Test: "def check(c): pass\n", EntryPoint: "f", CanonicalSolution: "    return 1\n"})
	}
	if err := os.WriteFile(problems, pf.Bytes(), 0o644); err != nil {
		f.Fatal(err)
	}
	ps, err := LoadProblems(problems)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"task_id":"HumanEval/0","completion":"    return 1\n"}`,
		`{"task_id":"HumanEval/0","completion":""}` + "\n\n" + `{"task_id":"HumanEval/1","completion":"x","extra":[1]}` + "\r\n",
		`{"task_id":"HumanEval/9","completion":"x"}`,
		`{"task_id":"HumanEval/../0","completion":"import os\nos.system('rm -rf /')"}`,
		`{"task_id":"HumanEval/0"}`,
		`{"task_id":null,"completion":null}`,
		`{"task_id":0,"completion":"x"}`,
		`{"task_id":"HumanEval/0","completion":"x"} {"task_id":"HumanEval/0","completion":"y"}`,
		`[{"task_id":"HumanEval/0","completion":"x"}]`,
		"\x1f\x8b\x08\x00\x00\x00\x00\x00",
		`not json`, ``, "\n \t\n", "{\"task_id\":\"HumanEval/0\",\"completion\":\"\xff\xfe\x00\"}",
		`{"task_id":"HumanEval/0","completion":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tmp := t.TempDir()
		plain := filepath.Join(tmp, "samples.jsonl")
		if err := os.WriteFile(plain, data, 0o644); err != nil {
			t.Fatal(err)
		}
		samples, err := LoadSamples(plain, ps)
		if err == nil {
			if len(samples) == 0 {
				t.Fatal("no error and no samples")
			}
			for _, s := range samples {
				if _, ok := ps.Get(s.TaskID); !ok {
					t.Fatalf("sample of unknown task %q", s.TaskID)
				}
				if !utf8.ValidString(s.TaskID) || !utf8.ValidString(s.Completion) {
					t.Fatalf("sample %q is not valid UTF-8", s.TaskID)
				}
			}
		}
		if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
			return // gzip: the reference below reads plain text
		}
		want, wantOK := referenceSamples(data, ps)
		if (err == nil) != wantOK || err == nil && !slices.Equal(samples, want) {
			t.Fatalf("LoadSamples: %v, %v; the reference: %v, %v", samples, err, want, wantOK)
		}

		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(data)
		_ = zw.Close()
		zipped := filepath.Join(tmp, "samples.jsonl.gz")
		if err := os.WriteFile(zipped, gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		zs, zerr := LoadSamples(zipped, ps)
		if (zerr == nil) != (err == nil) || !slices.Equal(zs, samples) {
			t.Fatalf("gzipped: %v, %v; plain: %v, %v", zs, zerr, samples, err)
		}
	})
}

// referenceSamples reads a plain samples file by the format's definition:
// keys are matched as encoding/json matches struct fields (exactly, else
// case-insensitively by Unicode simple folding), the last one wins, and
// every task_id or completion must be a string or null.
func referenceSamples(data []byte, ps *Problems) ([]Sample, bool) {
	var out []Sample
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) || line[0] != '{' {
			return nil, false
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		_, _ = dec.Token() // {
		var id, completion *string
		for dec.More() {
			tok, err := dec.Token()
			key, ok := tok.(string)
			var v json.RawMessage
			if err != nil || !ok || dec.Decode(&v) != nil {
				return nil, false
			}
			var dst **string
			switch foldKey(key) {
			case "TASK_ID":
				dst = &id
			case "COMPLETION":
				dst = &completion
			default:
				continue
			}
			if err := json.Unmarshal(v, dst); err != nil {
				return nil, false
			}
		}
		if id == nil || completion == nil {
			return nil, false
		}
		if _, ok := ps.Get(*id); !ok {
			return nil, false
		}
		out = append(out, Sample{TaskID: *id, Completion: *completion})
	}
	return out, len(out) > 0
}

// foldKey folds a JSON object key as encoding/json does to match it to a
// struct field case-insensitively.
func foldKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		if r < utf8.RuneSelf {
			b.WriteRune(unicode.ToUpper(r))
			continue
		}
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b.WriteRune(r)
	}
	return b.String()
}
