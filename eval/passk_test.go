package eval

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// Each want is C(n-c, k)/C(n, k) worked out by hand.
func TestPassAtK(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		n, c, k int
		want    float64
	}{
		{"NoneCorrect", 10, 0, 1, 0},
		{"AllCorrect", 10, 10, 7, 1},
		{"N5C2K1", 5, 2, 1, 1 - 3.0/5},      // C(3,1)/C(5,1) = 3/5
		{"N5C2K2", 5, 2, 2, 1 - 3.0/10},     // C(3,2)/C(5,2) = 3/10
		{"N5C2K3", 5, 2, 3, 1 - 1.0/10},     // C(3,3)/C(5,3) = 1/10
		{"N5C2K4", 5, 2, 4, 1},              // n-c = 3 < 4: any 4 include a correct one
		{"N10C3K5", 10, 3, 5, 1 - 21.0/252}, // C(7,5)/C(10,5) = 21/252
		{"N200C1K1", 200, 1, 1, 1.0 / 200},
		{"N200C1K100", 200, 1, 100, 0.5},                      // C(199,100)/C(200,100) = 100/200
		{"N200C2K100", 200, 2, 100, 1 - (100.0*99)/(200*199)}, // C(198,100)/C(200,100) = 100·99/(200·199)
		{"N1C1K1", 1, 1, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tt.want, PassAtK(tt.n, tt.c, tt.k), 1e-9)
		})
	}
}

func TestPassAtKPanicsOnNonsense(t *testing.T) {
	t.Parallel()
	for _, args := range [][3]int{{5, 6, 1}, {5, -1, 1}, {5, 2, 0}, {5, 2, 6}} {
		require.Panics(t, func() { PassAtK(args[0], args[1], args[2]) }, "%v", args)
	}
}

// Acceptance 2: a synthetic results file with known per-task counts
// (testdata/synthetic_results.jsonl):
//
//	HumanEval/0: n=5 c=2 (one of the failures timed out)
//	HumanEval/1: n=5 c=0, plus one internal_error that is not counted
//	HumanEval/2: n=5 c=5, plus one canceled that is not counted
//	HumanEval/3: n=5 c=1
//
// pass@k is the mean over the four tasks of 1 - C(5-c, k)/C(5, k).
func TestSummarizeSyntheticSamples(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/synthetic_results.jsonl")
	require.NoError(t, err)
	defer f.Close()
	var results []SampleResult
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r SampleResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		results = append(results, r)
	}
	require.NoError(t, sc.Err())
	ps := &Problems{Lang: Python, Flavor: FlavorHumanEval}
	for _, id := range []string{"HumanEval/0", "HumanEval/1", "HumanEval/2", "HumanEval/3", "HumanEval/4"} {
		ps.List = append(ps.List, Problem{TaskID: id})
	}

	got := Summarize(ps, results, []int{1, 2, 5, 10, 1})

	// pass@1: (2/5 + 0 + 1 + 1/5) / 4
	// pass@2: ((1 - 3/10) + 0 + 1 + (1 - 6/10)) / 4     C(3,2)=3, C(4,2)=6, C(5,2)=10
	// pass@5: (1 + 0 + 1 + 1) / 4                      n-c < 5 unless c = 0
	want := Summary{
		Problems: 5, Tasks: 4, Samples: 22, Passed: 8, Failed: 12, TimedOut: 1,
		Excluded: 2, ExcludedTasks: []string{"HumanEval/1", "HumanEval/2"},
		PassAt: map[string]float64{
			"pass@1": (2.0/5 + 0 + 1 + 1.0/5) / 4,
			"pass@2": ((1 - 3.0/10) + 0 + 1 + (1 - 6.0/10)) / 4,
			"pass@5": 3.0 / 4,
		},
		SkippedK:    []int{10},
		Unattempted: []string{"HumanEval/4"},
	}
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}
	require.InDelta(t, 0.4, got.PassAt["pass@1"], 1e-9)
	require.InDelta(t, 0.525, got.PassAt["pass@2"], 1e-9)
}

func TestEstimateSkipsTasksWithEverySampleExcluded(t *testing.T) {
	t.Parallel()
	got, skipped := Estimate(map[string]TaskCount{"a": {N: 2, C: 1}, "b": {N: 0, C: 0}}, []int{1, 2, 3})
	require.Equal(t, map[int]float64{1: 0.5, 2: 1}, got)
	require.Equal(t, []int{3}, skipped)
}
