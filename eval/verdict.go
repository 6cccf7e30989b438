package eval

import (
	"fmt"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// JudgeVerdict returns the verdict on a sample run as a judged job (a job
// with tests; see [StdioProblem.Job]) from its final Result. The worker
// has judged it: the Result's verdict decides.
//
//   - accepted (status succeeded): passed;
//   - time_limit: "timed out", a failure;
//   - wrong_answer, memory_limit, runtime_error, output_limit,
//     compile_error: "failed: <verdict>: case N: <why>";
//   - checker_error: excluded, like internal_error: the problem's checker
//     failed, which says nothing of the sample;
//   - no verdict: rejected is "failed: rejected: ..." (as [Judge]); any
//     other final status without a verdict (a worker that does not judge
//     tests) is excluded;
//   - internal_error, canceled, or a status that is not final: excluded.
//
// The Outcome carries the verdict, the score, the first case not accepted
// and its detail (the first difference of a wrong answer, the CPU time
// against the limit, the exit status and the error line of stderr).
func JudgeVerdict(r jobs.Result) Outcome {
	switch {
	case r.Status == jobs.StatusInternalError, r.Status == jobs.StatusCanceled, !r.Status.Final():
		return judge("", "", r) // excluded, as for any job
	case r.Verdict == "" && r.Status == jobs.StatusRejected:
		return judge("", "", r)
	case r.Verdict == "":
		return Outcome{Excluded: true, Result: clip(fmt.Sprintf("no verdict: the job ended %s without judging its tests", r.Status))}
	}
	o := Outcome{Verdict: r.Verdict, Score: r.Score}
	for _, c := range r.Cases {
		o.Rerun = o.Rerun || c.Rerun
	}
	where := ""
	for i, c := range r.Cases {
		if c.Verdict == jobs.VerdictAccepted || c.Verdict == jobs.VerdictSkipped {
			continue
		}
		o.FailedCase = i + 1
		where = fmt.Sprintf("case %d", i+1)
		if c.Name != "" {
			where += " (" + c.Name + ")"
		}
		o.Detail = caseDetail(r.Lang, c)
		break
	}
	if o.FailedCase == 0 && r.Verdict != jobs.VerdictAccepted {
		// No case to blame: the program did not compile, or the checker
		// did not.
		o.Detail = firstOf(compileLine(r), r.Reason)
	}
	o.Detail = clip(o.Detail)
	msg := string(r.Verdict)
	if where != "" {
		msg += ": " + where
	}
	if o.Detail != "" {
		msg += ": " + o.Detail
	}
	switch r.Verdict {
	case jobs.VerdictAccepted:
		if r.Status == jobs.StatusSucceeded {
			o.Passed, o.Result = true, "passed"
			return o
		}
		o.Result = "failed: " + clip(fmt.Sprintf("accepted, but the job ended %s", r.Status))
	case jobs.VerdictTimeLimit:
		o.Result = "timed out"
	case jobs.VerdictCheckerError:
		o.Excluded, o.Result = true, clip(msg)
	default:
		o.Result = "failed: " + clip(msg)
	}
	return o
}

// caseDetail says why case c failed: its detail, and for a runtime error
// the telling line of its stderr (a Python traceback's last line).
func caseDetail(lang string, c jobs.CaseResult) string {
	d := c.Detail
	if c.Verdict == jobs.VerdictRuntimeError && strings.TrimSpace(c.Stderr) != "" {
		l := errorLine(c.Stderr)
		if lang == string(Python) {
			l = lastLine(c.Stderr)
		}
		d = firstOf(d, string(c.Verdict)) + ": " + l
	}
	if c.Verdict == jobs.VerdictCheckerError && c.Checker != "" {
		d = firstOf(d, string(c.Verdict)) + ": " + firstLine(c.Checker)
	}
	return d
}
