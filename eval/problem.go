package eval

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Lang is a dataset language, named as sandq's language registry names it
// (so a Program's Lang is a job's lang).
type Lang string

// The languages of HumanEval and HumanEvalPack.
const (
	Python     Lang = "python"
	JavaScript Lang = "javascript"
	Java       Lang = "java"
	CPP        Lang = "cpp"
	Go         Lang = "go"
	Rust       Lang = "rust"
)

// Langs lists the languages eval assembles programs for.
func Langs() []Lang { return []Lang{Python, JavaScript, Java, CPP, Go, Rust} }

// ParseLang accepts a language's name or a usual alias (py, js, node,
// c++, golang, rs), case-insensitively.
func ParseLang(s string) (Lang, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "python", "py", "python3":
		return Python, nil
	case "javascript", "js", "node":
		return JavaScript, nil
	case "java":
		return Java, nil
	case "cpp", "c++", "cxx":
		return CPP, nil
	case "go", "golang":
		return Go, nil
	case "rust", "rs":
		return Rust, nil
	}
	return "", fmt.Errorf("eval: unknown language %q (want python, js, java, cpp, go or rust)", s)
}

// Flavor tells the two Python datasets apart; they assemble differently.
type Flavor string

const (
	// FlavorHumanEval is OpenAI's HumanEval ("HumanEval/N"): the test
	// defines check(candidate) and the harness appends the call.
	FlavorHumanEval Flavor = "humaneval"
	// FlavorPack is HumanEvalPack / HumanEval-X ("Python/N", "Go/N", ...):
	// the test calls its checks itself.
	FlavorPack Flavor = "humanevalpack"
)

// Problem is one task of HumanEval or HumanEvalPack. Fields a dataset
// lacks are empty.
type Problem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
	EntryPoint        string `json:"entry_point"`

	// HumanEvalPack only.
	Declaration   string `json:"declaration,omitempty"`
	BuggySolution string `json:"buggy_solution,omitempty"`
	// Go only: the test file's package clause and imports, and the
	// prompt's import block.
	TestSetup string `json:"test_setup,omitempty"`
	Import    string `json:"import,omitempty"`
}

// taskPrefixes maps a task ID's prefix (before the "/") to its dataset.
var taskPrefixes = map[string]struct {
	lang   Lang
	flavor Flavor
}{
	"HumanEval":  {Python, FlavorHumanEval},
	"Python":     {Python, FlavorPack},
	"JavaScript": {JavaScript, FlavorPack},
	"Java":       {Java, FlavorPack},
	"CPP":        {CPP, FlavorPack},
	"Go":         {Go, FlavorPack},
	"Rust":       {Rust, FlavorPack},
}

// TaskLang returns the language and flavor a task ID belongs to, from its
// prefix: "HumanEval/3" is HumanEval Python, "CPP/3" HumanEvalPack C++.
func TaskLang(taskID string) (Lang, Flavor, error) {
	prefix, _, ok := strings.Cut(taskID, "/")
	d, known := taskPrefixes[prefix]
	if !ok || !known {
		return "", "", fmt.Errorf("eval: task %q: unknown dataset (want HumanEval/N, Python/N, JavaScript/N, Java/N, CPP/N, Go/N or Rust/N)", taskID)
	}
	return d.lang, d.flavor, nil
}

// Problems is a loaded problem file: one language, one flavor, problems in
// file order.
type Problems struct {
	Lang     Lang
	Flavor   Flavor
	List     []Problem
	byTaskID map[string]int
}

// Get returns the problem with task ID id.
func (ps *Problems) Get(id string) (Problem, bool) {
	i, ok := ps.byTaskID[id]
	if !ok {
		return Problem{}, false
	}
	return ps.List[i], true
}

// LoadProblems reads a problem file: JSON lines, gzip-compressed or not
// (told by the gzip magic number, not the name). Every task must be of one
// dataset (see [TaskLang]) and have a prompt, a test and an entry point;
// task IDs must be unique. Unknown fields are ignored: HumanEvalPack
// carries many that evaluation does not use.
func LoadProblems(path string) (*Problems, error) {
	ps := &Problems{byTaskID: map[string]int{}}
	err := readJSONL(path, func(line int, b []byte) error {
		var p Problem
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		lang, flavor, err := TaskLang(p.TaskID)
		if err != nil {
			return err
		}
		switch {
		case ps.Lang == "":
			ps.Lang, ps.Flavor = lang, flavor
		case lang != ps.Lang || flavor != ps.Flavor:
			return fmt.Errorf("task %s is not of this file's dataset (%s %s, from its first task)", p.TaskID, ps.Flavor, ps.Lang)
		}
		if p.Prompt == "" || p.Test == "" || p.EntryPoint == "" {
			return fmt.Errorf("task %s: prompt, test and entry_point are required", p.TaskID)
		}
		if first, dup := ps.byTaskID[p.TaskID]; dup {
			return fmt.Errorf("task %s appears twice (first as problem %d)", p.TaskID, first+1)
		}
		ps.byTaskID[p.TaskID] = len(ps.List)
		ps.List = append(ps.List, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("eval: problems %s: %w", path, err)
	}
	if len(ps.List) == 0 {
		return nil, fmt.Errorf("eval: problems %s: no problems", path)
	}
	return ps, nil
}

// maxLine bounds one JSON line of a problem or sample file.
const maxLine = 64 << 20

// readJSONL calls fn with each non-blank line of path (1-based line
// numbers), transparently gunzipping. An error from fn is returned with
// the line number.
func readJSONL(path string, fn func(line int, b []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), maxLine)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := fn(n, b); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line is longer than %d bytes", maxLine)
		}
		return err
	}
	return nil
}
