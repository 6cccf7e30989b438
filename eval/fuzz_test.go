package eval

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadSamples: any samples file loads into samples of known tasks, or
// fails with an error; it never panics.
func FuzzLoadSamples(f *testing.F) {
	dir := f.TempDir()
	problems := filepath.Join(dir, "problems.jsonl")
	if err := os.WriteFile(problems, []byte(`{"task_id":"HumanEval/0","prompt":"def f():\n","test":"def check(c): pass\n","entry_point":"f","canonical_solution":"    return 1\n"}`+"\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	ps, err := LoadProblems(problems)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"task_id":"HumanEval/0","completion":"    return 1\n"}`,
		`{"task_id":"HumanEval/0","completion":""}` + "\n\n" + `{"task_id":"HumanEval/0","completion":"x"}`,
		`{"task_id":"HumanEval/9","completion":"x"}`,
		`{"task_id":"HumanEval/0"}`,
		`{"task_id":null,"completion":null}`,
		"\x1f\x8b\x08\x00\x00\x00\x00\x00",
		`not json`, ``, "{\"task_id\":\"HumanEval/0\",\"completion\":\"\xff\xfe\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "samples.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		samples, err := LoadSamples(path, ps)
		if err != nil {
			return
		}
		if len(samples) == 0 {
			t.Fatal("no error and no samples")
		}
		for _, s := range samples {
			if _, ok := ps.Get(s.TaskID); !ok {
				t.Fatalf("sample of unknown task %q", s.TaskID)
			}
		}
	})
}
