package eval

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

func ptr[T any](v T) *T { return &v }

// writeTemp writes content to a file of t's temporary directory.
func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// gzipped writes the gzip of the file at path beside it.
func gzipped(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err = zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	out := filepath.Join(t.TempDir(), filepath.Base(path)+".gz")
	require.NoError(t, os.WriteFile(out, buf.Bytes(), 0o644))
	return out
}

func TestLoadCodeContests(t *testing.T) {
	t.Parallel()
	want := []StdioProblem{
		{
			TaskID: "1000_a_sum",
			// The inputs lack their final newline, which is added; one
			// that has it is left alone. Outputs are as given.
			Tests:     []jobs.TestCase{{Stdin: "1 2\n", ExpectedStdout: "3"}, {Stdin: "10 -4\n", ExpectedStdout: "6"}},
			Solutions: []Solution{{Lang: "python3", Code: "a, b = map(int, input().split())\nprint(a + b)\n"}},
		},
		{
			TaskID: "1001_b_any_divisor",
			Tests: []jobs.TestCase{{Stdin: "6\n", ExpectedStdout: "2"}, {Stdin: "9\n", ExpectedStdout: "3"},
				{Stdin: "7\n3\n", ExpectedStdout: "7"}},
			Solutions:    []Solution{{Lang: "python3", Code: "n = int(input())\nprint(next(d for d in range(2, n + 1) if n % d == 0))\n"}},
			NeedsChecker: true,
		},
	}
	for _, path := range []string{"testdata/codecontests.jsonl", gzipped(t, "testdata/codecontests.jsonl")} {
		got, err := LoadStdioProblems(FormatCodeContests, path)
		require.NoError(t, err)
		require.Equal(t, FormatCodeContests, got.Format)
		if diff := cmp.Diff(want, got.List); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", path, diff)
		}
		require.Empty(t, got.Skipped)
		p, ok := got.Get("1001_b_any_divisor")
		require.True(t, ok)
		require.True(t, p.NeedsChecker)
		_, ok = got.Get("nope")
		require.False(t, ok)
	}
}

func TestLoadCodeContestsRefusesOtherShapes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, line, want string
	}{
		{"DeepMindLayout", `{"name": "1000_A", "id": "x", "public_tests": {"input": ["1"], "output": ["1"]}}`, "not DeepMind's public_tests/private_tests/generated_tests"},
		{"NoTests", `{"id": "x", "tests": []}`, `task x: no tests (want "tests": [{"stdin", "stdout"}])`},
		{"NoID", `{"tests": [{"stdin": "1", "stdout": "1"}]}`, `a problem without an "id"`},
		{"TestWithoutStdout", `{"id": "x", "tests": [{"stdin": "1"}]}`, `task x: test 1: want {"stdin", "stdout"}`},
		{"Duplicate", `{"id": "x", "tests": [{"stdin": "1", "stdout": "1"}]}` + "\n" + `{"id": "x", "tests": [{"stdin": "1", "stdout": "1"}]}`, "line 2: task x appears twice"},
		{"Empty", "\n\n", "no problems"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadStdioProblems(FormatCodeContests, writeTemp(t, "cc.jsonl", tt.line))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// The real sample of ../shared/data: every problem loads, with every test,
// each input ending with a newline, and each reference solution makes a
// valid job under sandq's languages and default caps.
func TestLoadCodeContestsSharedData(t *testing.T) {
	t.Parallel()
	ps, err := LoadStdioProblems(FormatCodeContests, filepath.Join(dataDir(t), "codecontests", "codecontests_300.jsonl.gz"))
	require.NoError(t, err)
	require.Len(t, ps.List, 300)
	require.Empty(t, ps.Skipped)
	tests, flagged := 0, 0
	for _, p := range ps.List {
		require.NotEmpty(t, p.Tests, p.TaskID)
		tests += len(p.Tests)
		for i, tc := range p.Tests {
			require.True(t, strings.HasSuffix(tc.Stdin, "\n"), "%s test %d: input %q lacks its final newline", p.TaskID, i+1, tc.Stdin)
			require.False(t, strings.HasSuffix(tc.Stdin, "\n\n"), "%s test %d: two final newlines", p.TaskID, i+1)
		}
		require.Len(t, p.Solutions, 1, p.TaskID)
		if p.NeedsChecker {
			flagged++
		}
	}
	require.Equal(t, 2999, tests)
	require.Equal(t, 71, flagged, "heuristic_needs_checker problems (../shared/data/README.md)")

	refs := ps.References()
	require.Len(t, refs, 300)
	policy := langs.Policy(jobs.Policy{})
	for _, s := range refs {
		require.Equal(t, "python3", s.Lang)
		p, _ := ps.Get(s.TaskID)
		j := p.Job(s, JudgeDefaults{})
		require.NoError(t, policy.Validate(&j), s.TaskID)
		require.Len(t, j.Tests, len(p.Tests))
	}

	require.Equal(t, 71, ps.SkipNeedsChecker())
	require.Len(t, ps.List, 229)
	require.Len(t, ps.Skipped, 71)
	reason, ok := ps.SkipReason(ps.Skipped[0].TaskID)
	require.True(t, ok)
	require.Contains(t, reason, "needing a checker")
}

func TestLoadAPPS(t *testing.T) {
	t.Parallel()
	ps, err := LoadStdioProblems(FormatAPPS, "testdata/apps.jsonl")
	require.NoError(t, err)
	wantList := []StdioProblem{
		{
			TaskID: "10",
			Tests:  []jobs.TestCase{{Stdin: "1 2\n", ExpectedStdout: "3\n"}, {Stdin: "3 4\n", ExpectedStdout: "7\n"}},
			Solutions: []Solution{
				{Lang: "python", Code: "a, b = map(int, input().split())\nprint(a + b)\n"},
				{Lang: "python", Code: "print(sum(map(int, input().split())))\n"},
			},
		},
		{
			// Lists of strings are joined with "\n".
			TaskID:    "11",
			Tests:     []jobs.TestCase{{Stdin: "2\na b\n", ExpectedStdout: "2\na b"}},
			Solutions: []Solution{{Lang: "python", Code: "import sys\nprint(sys.stdin.read(), end='')\n"}},
		},
		{TaskID: "14", Tests: []jobs.TestCase{{Stdin: "\n", ExpectedStdout: "1\n"}}},
	}
	if diff := cmp.Diff(wantList, ps.List); diff != "" {
		t.Fatalf("problems (-want +got):\n%s", diff)
	}
	// Call-based problems and problems without tests are skipped, each
	// with its reason.
	wantSkipped := []SkippedProblem{
		{TaskID: "12", Reason: `call-based (fn_name "add"): its tests call a function, not standard input and output`},
		{TaskID: "13", Reason: "no tests (input_output is empty)"},
	}
	if diff := cmp.Diff(wantSkipped, ps.Skipped); diff != "" {
		t.Fatalf("skipped (-want +got):\n%s", diff)
	}
	reason, ok := ps.SkipReason("12")
	require.True(t, ok)
	require.Contains(t, reason, "call-based")
	_, ok = ps.Get("12")
	require.False(t, ok)

	// References: every solution of the problems evaluated.
	require.Equal(t, []Sample{
		{TaskID: "10", Completion: wantList[0].Solutions[0].Code, Lang: "python"},
		{TaskID: "10", Completion: wantList[0].Solutions[1].Code, Lang: "python"},
		{TaskID: "11", Completion: wantList[1].Solutions[0].Code, Lang: "python"},
	}, ps.References())
}

func TestLoadAPPSEdgeCases(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, line string
		wantID     string
		wantSkip   string
		wantErr    string
	}{
		// Fields already decoded, and a problem_id given as a string.
		{"Decoded", `{"problem_id": "a7", "solutions": ["print(1)"], "input_output": {"inputs": ["x"], "outputs": ["1"]}}`, "a7", "", ""},
		{"Mismatch", `{"problem_id": 1, "input_output": "{\"inputs\": [\"1\"], \"outputs\": []}"}`, "1", "1 inputs but 0 outputs", ""},
		{"NumberInput", `{"problem_id": 1, "input_output": "{\"inputs\": [5], \"outputs\": [\"5\"]}"}`, "1", "test 1: its input is neither a string nor a list of strings", ""},
		{"BadEmbeddedJSON", `{"problem_id": 1, "input_output": "{not json"}`, "", "", "task 1: input_output:"},
		{"NoID", `{"input_output": ""}`, "", "", `a problem without a "problem_id"`},
		{"FloatID", `{"problem_id": 1.5, "input_output": ""}`, "", "", "problem_id 1.5: want an integer or a string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, skip, err := readAPPS([]byte(tt.line))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantID, p.TaskID)
			require.Equal(t, tt.wantSkip, skip)
		})
	}
	// A file whose every problem is skipped has nothing to evaluate.
	_, err := LoadStdioProblems(FormatAPPS, writeTemp(t, "apps.jsonl",
		`{"problem_id": 3, "input_output": "{\"fn_name\": \"f\", \"inputs\": [[1]], \"outputs\": [1]}"}`))
	require.ErrorContains(t, err, `all 1 problems are skipped, none can be evaluated (the first, 3: call-based (fn_name "f")`)
}

func TestLoadStdioJSONL(t *testing.T) {
	t.Parallel()
	ps, err := LoadStdioProblems(FormatStdioJSONL, "testdata/stdio.jsonl")
	require.NoError(t, err)
	want := []StdioProblem{
		{
			TaskID: "echo",
			// Inputs are taken byte for byte.
			Tests:  []jobs.TestCase{{Name: "small", Stdin: "hi\n", ExpectedStdout: "hi\n"}, {StdinKey: "echo/big.txt", ExpectedStdout: "big\n"}},
			Limits: jobs.Limits{CPUMS: 500, MemoryMB: 64},
			Solutions: []Solution{
				{Lang: "python", Code: "import sys\nsys.stdout.write(sys.stdin.read())\n"},
				{Lang: "bash", Code: "cat\n"},
			},
		},
		{
			TaskID: "any-root",
			Tests:  []jobs.TestCase{{Stdin: "4\n", ExpectedStdout: "2\n"}},
			Judge: &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "python",
				Code: "import sys\nn = int(open(sys.argv[1]).read())\nx = int(open(sys.argv[2]).read())\nsys.exit(0 if x * x == n else 1)\n"},
				StopOnFirstFailure: ptr(false)},
		},
		{TaskID: "pi", Tests: []jobs.TestCase{{ExpectedStdout: "3.14159\n"}}, Judge: &jobs.JudgeSpec{Compare: jobs.CompareFloat, AbsTol: 0.001}},
	}
	if diff := cmp.Diff(want, ps.List); diff != "" {
		t.Fatalf("problems (-want +got):\n%s", diff)
	}
	require.Len(t, ps.References(), 2)
}

func TestLoadStdioJSONLIsStrict(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, line, want string
	}{
		{"MisspeltExpectation", `{"task_id": "a", "tests": [{"stdin": "1", "expected_output": "1"}]}`, `unknown field "expected_output"`},
		{"UnknownTopField", `{"task_id": "a", "tests": [{"stdin": "1"}], "time_limit": 2}`, `unknown field "time_limit"`},
		{"UnknownLimit", `{"task_id": "a", "tests": [{"stdin": "1"}], "limits": {"cpu": 2}}`, `unknown field "cpu"`},
		{"NoTests", `{"task_id": "a"}`, `task a: no tests`},
		{"NoTaskID", `{"tests": [{"stdin": "1"}]}`, `a problem without a "task_id"`},
		{"SolutionWithoutLang", `{"task_id": "a", "tests": [{"stdin": "1"}], "solutions": [{"code": "x"}]}`, `task a: solution 1: want {"lang", "code"}`},
		{"TwoValues", `{"task_id": "a", "tests": [{"stdin": "1"}]} {"task_id": "b"}`, "more than one JSON value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadStdioProblems(FormatStdioJSONL, writeTemp(t, "p.jsonl", tt.line))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for _, f := range Formats() {
		got, err := ParseFormat(strings.ToUpper(string(f)))
		require.NoError(t, err)
		require.Equal(t, f, got)
		require.Equal(t, f != FormatHumanEval, f.Judged())
	}
	_, err := ParseFormat("taco")
	require.ErrorContains(t, err, `unknown format "taco"`)
	_, err = LoadStdioProblems(FormatHumanEval, "testdata/stdio.jsonl")
	require.ErrorContains(t, err, "not a judged format")
}

func TestStdioSamples(t *testing.T) {
	t.Parallel()
	ps, err := LoadStdioProblems(FormatAPPS, "testdata/apps.jsonl")
	require.NoError(t, err)
	path := writeTemp(t, "samples.jsonl", strings.Join([]string{
		`{"task_id": "10", "completion": "print(3)", "lang": "python"}`,
		`{"task_id": "11", "completion": "cat", "lang": "bash"}`,
		`{"task_id": "11", "completion": "print(2)"}`,
		// A sample of a skipped problem is counted, not run.
		`{"task_id": "12", "completion": "print(3)"}`,
	}, "\n"))
	got, skipped, err := LoadStdioSamples(path, ps, "python3")
	require.NoError(t, err)
	require.Equal(t, []Sample{
		{TaskID: "10", Completion: "print(3)", Lang: "python"},
		{TaskID: "11", Completion: "cat", Lang: "bash"},
		{TaskID: "11", Completion: "print(2)"},
	}, got)
	require.Equal(t, 1, skipped)

	// Without a default language, a sample must name its own.
	_, _, err = LoadStdioSamples(path, ps, "")
	require.ErrorContains(t, err, `line 3: task 11: the sample has no "lang" and no default language was given`)

	for _, tt := range []struct{ name, line, want string }{
		{"UnknownTask", `{"task_id": "99", "completion": "x"}`, `line 1: task "99" is not in the problem file`},
		{"EmptyLang", `{"task_id": "10", "completion": "x", "lang": " "}`, `"lang" is empty`},
		{"NoCompletion", `{"task_id": "10"}`, `want {"task_id": ..., "completion": ...}`},
	} {
		_, _, err := LoadStdioSamples(writeTemp(t, "s.jsonl", tt.line), ps, "python")
		require.ErrorContains(t, err, tt.want, tt.name)
	}
}

// A judged job takes the sample's program and language, the problem's
// tests, and the problem's judge spec and limits, filled from the
// defaults where the problem says nothing.
func TestStdioProblemJob(t *testing.T) {
	t.Parallel()
	tests := []jobs.TestCase{{Stdin: "1\n", ExpectedStdout: "1\n"}}
	checker := &jobs.Checker{Lang: "python", Code: "import sys; sys.exit(0)"}
	defaults := JudgeDefaults{
		Lang:     "cpp",
		Limits:   jobs.Limits{CPUMS: 3000, MemoryMB: 512, TimeoutMS: 9000},
		Compare:  jobs.CompareTokens,
		AllCases: true,
	}
	for _, tt := range []struct {
		name     string
		problem  StdioProblem
		sample   Sample
		defaults JudgeDefaults
		want     jobs.Job
	}{
		{
			name:    "NothingSet",
			problem: StdioProblem{TaskID: "a", Tests: tests},
			sample:  Sample{TaskID: "a", Completion: "print(1)", Lang: "python"},
			want:    jobs.Job{Lang: "python", Code: "print(1)", Tests: tests},
		},
		{
			name:     "DefaultsFill",
			problem:  StdioProblem{TaskID: "a", Tests: tests},
			sample:   Sample{TaskID: "a", Completion: "int main(){}"},
			defaults: defaults,
			want: jobs.Job{Lang: "cpp", Code: "int main(){}", Tests: tests, Limits: defaults.Limits,
				Judge: &jobs.JudgeSpec{Compare: jobs.CompareTokens, StopOnFirstFailure: ptr(false)}},
		},
		{
			name: "ProblemWins",
			problem: StdioProblem{TaskID: "a", Tests: tests, Limits: jobs.Limits{CPUMS: 1000},
				Judge: &jobs.JudgeSpec{Compare: jobs.CompareExact, StopOnFirstFailure: ptr(true)}},
			sample:   Sample{TaskID: "a", Completion: "x", Lang: "go"},
			defaults: defaults,
			want: jobs.Job{Lang: "go", Code: "x", Tests: tests, Limits: jobs.Limits{CPUMS: 1000, MemoryMB: 512, TimeoutMS: 9000},
				Judge: &jobs.JudgeSpec{Compare: jobs.CompareExact, StopOnFirstFailure: ptr(true)}},
		},
		{
			// A checker judges instead of a comparison: --compare does
			// not apply.
			name:     "Checker",
			problem:  StdioProblem{TaskID: "a", Tests: tests, Judge: &jobs.JudgeSpec{Checker: checker}},
			sample:   Sample{TaskID: "a", Completion: "x"},
			defaults: defaults,
			want: jobs.Job{Lang: "cpp", Code: "x", Tests: tests, Limits: defaults.Limits,
				Judge: &jobs.JudgeSpec{Checker: checker, StopOnFirstFailure: ptr(false)}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.problem.Job(tt.sample, tt.defaults)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("job (-want +got):\n%s", diff)
			}
		})
	}

	// The problem's judge spec is copied, never shared with the job.
	spec := &jobs.JudgeSpec{Compare: jobs.CompareLines}
	p := StdioProblem{TaskID: "a", Tests: tests, Judge: spec}
	j := p.Job(Sample{Completion: "x", Lang: "python"}, JudgeDefaults{AllCases: true})
	require.NotSame(t, spec, j.Judge)
	require.Nil(t, spec.StopOnFirstFailure)
}
