package worker

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/judge"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// Judge mode (jobs.Job.Tests). A judged job runs in one container, request
// by request: its files and compile step, then each test case as a step of
// its own (agent.Step.FreshCase: a fresh process, the work dir read-only,
// the scratch mounts emptied), each compared as it ends, so the job can
// stop at its first failed case. A case whose time_limit load could
// explain is run once more (judge.Suspect). With a checker, the cases'
// outputs are kept (in temporary files) and the checker runs in a
// container of its own language after the cases, never in the
// contestant's.

// rerunWallFactor widens a rerun's wall-time backstop: a case starved of
// CPU gets room to use its CPU time.
const rerunWallFactor = 10

// caseOutputBudget bounds the outputs a checker-judged job keeps for its
// checker; cases past it are not run (skipped).
const caseOutputBudget = 256 << 20

// judged runs a judged job and fills res with its verdict, cases and
// status (outcomeFinal), or returns the fault.
func (h *Handler) judged(ctx context.Context, job jobs.Job, set libs, res *jobs.Result) (outcome, error) {
	spec, req, err := h.plan(ctx, job, set)
	if errors.Is(err, errInfra) {
		return h.interrupted(ctx, outcomeInfra), err
	}
	if err != nil {
		return outcomeRejected, err
	}
	inputs, err := h.caseInputs(ctx, job)
	if errors.Is(err, errInfra) {
		return h.interrupted(ctx, outcomeInfra), err
	}
	if err != nil {
		return outcomeRejected, err
	}
	lang, _ := langs.Lookup(job.Lang)
	// The plan's last step is the program's run: the cases' template.
	tmpl := req.Steps[len(req.Steps)-1]
	req.Steps = req.Steps[:len(req.Steps)-1]
	req.Collect = nil
	lim := LimitsOf(job.Limits)
	limits := judge.Limits{CPU: time.Duration(job.Limits.CPUMS) * time.Millisecond, Wall: lim.Timeout}
	caseStep := func(i int, wall time.Duration) agent.Step {
		st := tmpl
		st.Name, st.Stdin, st.Timeout = "case", inputs[i], wall
		// Prestart stays the run's: a Python case is forked from a server
		// the agent starts on the job's script once the work dir is frozen.
		st.FreshCase, st.Live, st.StopOnFailure = true, false, false
		// RLIMIT_CPU stops a program once its CPU time is past what a
		// rerun could clear (judge.RerunMargin), whatever its wall time:
		// a rerun's wider wall backstop never lets a loop run on.
		cpuCap := time.Duration(float64(limits.CPU) * (1 + judge.RerunMargin))
		st.Rlimits.CPU = uint64((cpuCap+time.Second-1)/time.Second) + 1
		return st
	}
	checker := job.Judge != nil && job.Judge.Checker != nil
	var kept *caseOutputs
	if checker {
		if kept, err = newCaseOutputs(); err != nil {
			return outcomeInfra, fmt.Errorf("%w: %w", errInfra, err)
		}
		defer kept.remove()
	}

	cases := make([]jobs.CaseResult, len(job.Tests))
	for i := range cases {
		cases[i] = jobs.CaseResult{Name: job.Tests[i].Name, Verdict: jobs.VerdictSkipped}
	}
	stop := job.Judge.StopsOnFailure()
	var canceled bool
	running := -1 // the case whose run is under way, if any
	err = h.cfg.Sandbox.RunSeq(ctx, spec, func(run sandbox.RunFunc) error {
		out, cached, err := h.compileRun(ctx, run, job.Tenant, spec, req, set.volume == "" && job.Network == nil)
		if err != nil {
			return err
		}
		if out.FilesError != "" {
			res.Status, res.Reason = jobs.StatusRejected, "input files: "+out.FilesError
			return nil
		}
		fill(res, job, out) // the compile step's record
		if res.Compile != nil {
			res.Compile.Cached = cached
		}
		if c := out.Last(); c.Canceled {
			canceled = true
			return nil
		} else if len(out.Steps) > 0 && !c.OK() {
			res.Verdict = jobs.VerdictCompileError
			return nil
		}
		for i, tc := range job.Tests {
			running = i
			r, err := runCase(ctx, run, caseStep(i, limits.Wall), req.MemoryLimit, lang.MemoryErrors)
			if err != nil {
				return err
			}
			if r.canceled {
				canceled = true
				return nil
			}
			var c jobs.CaseResult
			if checker {
				c = judge.Usage(tc, r.Run)
				if v, detail, failed := judge.RunVerdict(r.Run, limits); failed {
					c.Verdict, c.Detail, c.Stderr = v, detail, judge.Head(r.Stderr)
				} else if kept.size+int64(len(r.Stdout)) > caseOutputBudget {
					return nil // the rest stay skipped
				} else if err := kept.put(i, r.Stdout); err != nil {
					return fmt.Errorf("%w: keep case output: %w", errInfra, err)
				}
			} else {
				c = judge.Case(job.Judge, tc, r.Run, limits)
			}
			if c.Verdict == jobs.VerdictTimeLimit && judge.Suspect(r.Run, limits) {
				if c, err = h.rerun(ctx, run, job, tc, caseStep(i, min(limits.Wall*rerunWallFactor, maxWall(h.cfg.Policy))), req.MemoryLimit, limits, kept, i); err != nil {
					return err
				}
			}
			cases[i], running = c, -1
			if stop && c.Verdict != "" && c.Verdict != jobs.VerdictAccepted {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		o, err := h.runError(ctx, job, res, err)
		if o == outcomeFinal {
			sandboxLost(res, cases, running)
		}
		return o, err
	}
	if canceled {
		return h.caseCanceled(ctx, job, res)
	}
	if res.Status == jobs.StatusRejected {
		return outcomeFinal, nil
	}
	if res.Verdict != jobs.VerdictCompileError {
		if checker {
			if err := h.check(ctx, job, inputs, kept, cases, stop); err != nil {
				return h.runError(ctx, job, res, err)
			}
		}
		for i := range cases {
			if cases[i].Verdict == "" { // kept for a checker that did not get to it
				cases[i].Verdict = jobs.VerdictSkipped
			}
		}
		res.Cases = cases
	}
	h.finishJudged(ctx, job, res, spec)
	return outcomeFinal, nil
}

// sandboxLost completes a judged job whose sandbox was lost to what the
// job did (runError's final outcomes: the container's OOM kill, an agent
// that stopped answering) with what a judged Result always has: cases, a
// verdict and a score. The case that was running gets the status's
// verdict and the reason; the cases before it keep theirs, the rest stay
// skipped. Lost outside any case (compiling), the job's verdict is the
// status's, score 0.
func sandboxLost(res *jobs.Result, cases []jobs.CaseResult, running int) {
	v := jobs.VerdictRuntimeError
	switch res.Status {
	case jobs.StatusOOM:
		v = jobs.VerdictMemoryLimit
	case jobs.StatusTimeout:
		v = jobs.VerdictTimeLimit
	}
	score := 0.0
	if running >= 0 && running < len(cases) {
		cases[running].Verdict, cases[running].Detail = v, res.Reason
		res.Verdict, score = judge.Summarize(cases)
	} else {
		res.Verdict = v
	}
	res.Cases, res.Score = cases, &score
}

// maxWall is the policy's cap on a step's wall time.
func maxWall(p jobs.Policy) time.Duration {
	return time.Duration(p.WithDefaults().MaxLimits.TimeoutMS) * time.Millisecond
}

// caseRun is one run of a case.
type caseRun struct {
	judge.Run
	canceled bool
}

// runCase runs one case's step in the job's container; oomMarks are the
// language's out-of-memory errors.
func runCase(ctx context.Context, run sandbox.RunFunc, st agent.Step, mem int64, oomMarks []string) (caseRun, error) {
	out, err := run(ctx, &agent.RunRequest{Steps: []agent.Step{st}, MemoryLimit: mem})
	if err != nil {
		return caseRun{}, err
	}
	if out.FilesError != "" || len(out.Steps) == 0 {
		return caseRun{}, fmt.Errorf("%w: the case did not run: %s", errInfra, out.FilesError)
	}
	s := out.Steps[0]
	r := caseRun{canceled: s.Canceled, Run: judge.Run{
		Started: s.Started, ExitCode: s.ExitCode, Signal: s.Signal, TimedOut: s.TimedOut, OOMKilled: s.OOMKilled,
		CPU: time.Duration(s.CPUNs), Wall: time.Duration(s.WallNs), MaxRSSKB: s.MaxRSSKB,
		Stdout: s.Stdout.Bytes(), Stderr: s.Stderr.Bytes(), Truncated: s.Stdout.Truncated, Error: s.Error,
	}}
	if s.ExitCode != 0 || s.Signal != 0 {
		for _, m := range oomMarks {
			r.OutOfMemory = r.OutOfMemory || strings.Contains(string(r.Stderr), m)
		}
	}
	return r, nil
}

// rerunMu makes a worker's reruns one at a time: a rerun is not slowed by
// another rerun.
var rerunMu sync.Mutex

// rerun runs case i again (its step st with a wider wall backstop) and
// returns its verdict, marked Rerun.
func (h *Handler) rerun(ctx context.Context, run sandbox.RunFunc, job jobs.Job, tc jobs.TestCase, st agent.Step, mem int64, limits judge.Limits, kept *caseOutputs, i int) (jobs.CaseResult, error) {
	rerunMu.Lock()
	lang, _ := langs.Lookup(job.Lang)
	r, err := runCase(ctx, run, st, mem, lang.MemoryErrors)
	rerunMu.Unlock()
	if err != nil {
		return jobs.CaseResult{}, err
	}
	limits.Wall = st.Timeout
	var c jobs.CaseResult
	if kept != nil {
		c = judge.Usage(tc, r.Run)
		if v, detail, failed := judge.RunVerdict(r.Run, limits); failed {
			c.Verdict, c.Detail, c.Stderr = v, detail, judge.Head(r.Stderr)
		} else if err := kept.put(i, r.Stdout); err != nil {
			return jobs.CaseResult{}, fmt.Errorf("%w: keep case output: %w", errInfra, err)
		}
	} else {
		c = judge.Case(job.Judge, tc, r.Run, limits)
	}
	c.Rerun = true
	return c, nil
}

// caseInputs returns each case's standard input, fetching those given by
// key; together at most the policy's MaxTestBytes.
func (h *Handler) caseInputs(ctx context.Context, job jobs.Job) ([][]byte, error) {
	budget := h.cfg.Policy.WithDefaults().MaxTestBytes
	var total int64
	out := make([][]byte, len(job.Tests))
	for i, tc := range job.Tests {
		out[i] = []byte(tc.Stdin)
		if tc.StdinKey != "" {
			data, err := h.fetch(ctx, job.Tenant, tc.StdinKey, budget-total)
			if err != nil {
				return nil, fmt.Errorf("tests[%d].stdin_key: %w", i, err)
			}
			out[i] = data
		}
		total += int64(len(out[i]) + len(tc.ExpectedStdout))
		if total > budget {
			return nil, fmt.Errorf("the tests' inputs and expected outputs total more than %d bytes, the cap", budget)
		}
	}
	return out, nil
}

// caseOutputs keeps the outputs of a checker-judged job's cases, in
// temporary files, for the checker.
type caseOutputs struct {
	dir  string
	size int64
	have map[int]bool
}

func newCaseOutputs() (*caseOutputs, error) {
	dir, err := os.MkdirTemp("", "sandq-case-outputs-")
	return &caseOutputs{dir: dir, have: map[int]bool{}}, err
}

func (k *caseOutputs) path(i int) string { return fmt.Sprintf("%s/%d", k.dir, i) }

func (k *caseOutputs) put(i int, out []byte) error {
	k.size += int64(len(out))
	k.have[i] = true
	return os.WriteFile(k.path(i), out, 0o600)
}

func (k *caseOutputs) get(i int) ([]byte, error) { return os.ReadFile(k.path(i)) }

func (k *caseOutputs) remove() { _ = os.RemoveAll(k.dir) }

// check runs the job's checker on every case whose output was kept, in
// order, in a container of the checker's language (its own compile once),
// and sets those cases' verdicts; with stop, the cases after the first
// rejected one are skipped.
func (h *Handler) check(ctx context.Context, job jobs.Job, inputs [][]byte, kept *caseOutputs, cases []jobs.CaseResult, stop bool) error {
	var pending []int
	for i := range cases {
		if kept.have[i] {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	c := job.Judge.Checker
	lang, ok := langs.Lookup(c.Lang)
	if !ok {
		return fmt.Errorf("unknown checker language %q", c.Lang)
	}
	// The checker runs as a job of its own language, the contestant's
	// limits but for its wall time, in the tenant's containers.
	cj := jobs.Job{Lang: lang.Name, Code: c.Code, Tenant: job.Tenant, Limits: job.Limits, Isolation: job.Isolation}
	cj.Limits.TimeoutMS = max(cj.Limits.TimeoutMS, 10_000)
	h.cfg.Policy.FillLimits(&cj)
	spec, req, err := h.plan(ctx, cj, libs{})
	if err != nil {
		return err
	}
	tmpl := req.Steps[len(req.Steps)-1]
	req.Steps = req.Steps[:len(req.Steps)-1]
	req.Collect = nil
	failed := false
	setAll := func(v jobs.Verdict, detail string) {
		for _, i := range pending {
			cases[i].Verdict, cases[i].Detail = v, detail
		}
	}
	return h.cfg.Sandbox.RunSeq(ctx, spec, func(run sandbox.RunFunc) error {
		out, _, err := h.compileRun(ctx, run, job.Tenant, spec, req, true)
		if err != nil {
			return err
		}
		if st := out.Last(); out.FilesError != "" || (len(out.Steps) > 0 && !st.OK()) {
			why := cmp.Or(out.FilesError, string(st.Stderr.Bytes()), string(st.Stdout.Bytes()), st.Error)
			setAll(jobs.VerdictCheckerError, "the checker did not compile: "+judge.Head([]byte(why)))
			return nil
		}
		last := -1
		for _, i := range pending {
			if failed && stop {
				cases[i].Verdict = jobs.VerdictSkipped
				continue
			}
			output, err := kept.get(i)
			if err != nil {
				return fmt.Errorf("%w: read case output: %w", errInfra, err)
			}
			// Each case's files go to a directory of their own (the agent
			// never overwrites a file); the step removes the previous
			// case's before the checker starts, so the tmpfs holds one
			// case's at a time.
			dir, prev := fmt.Sprintf("check/%d", i), fmt.Sprintf("check/%d", last)
			last = i
			st := tmpl
			st.Name = "check"
			st.Argv = slices.Concat([]string{"/bin/sh", "-c", `rm -rf -- "$0"; exec "$@"`, prev}, tmpl.Argv,
				[]string{dir + "/input", dir + "/output", dir + "/answer"})
			r, err := run(ctx, &agent.RunRequest{
				Files: []agent.File{{Path: dir + "/input", Data: inputs[i]}, {Path: dir + "/output", Data: output},
					{Path: dir + "/answer", Data: []byte(job.Tests[i].ExpectedStdout)}},
				Steps: []agent.Step{st}, MemoryLimit: req.MemoryLimit,
			})
			if err != nil {
				return err
			}
			if r.FilesError != "" || len(r.Steps) == 0 {
				cases[i].Verdict, cases[i].Detail = jobs.VerdictCheckerError, "the checker's files: "+r.FilesError
				failed = true
				continue
			}
			s := r.Steps[0]
			v, detail := judge.CheckerVerdict(judge.Run{Started: s.Started, ExitCode: s.ExitCode, Signal: s.Signal,
				TimedOut: s.TimedOut, OOMKilled: s.OOMKilled, Error: s.Error,
				Crashed: crashed(lang.CrashMarkers, s.Stderr.Bytes(), output)})
			cases[i].Verdict, cases[i].Detail = v, detail
			cases[i].Checker = judge.Head(append(s.Stdout.Bytes(), s.Stderr.Bytes()...))
			if v != jobs.VerdictAccepted {
				cases[i].Stdout, cases[i].Expected = judge.Head(output), judge.Head([]byte(job.Tests[i].ExpectedStdout))
				failed = true
			}
		}
		return nil
	})
}

// crashed reports whether a checker's stderr shows its runtime's crash
// markers. A marker the contestant's output holds does not count: a
// checker that echoes the output must not let a contestant turn its wrong
// answer into a checker_error, which is never blamed on it.
func crashed(markers []string, stderr, output []byte) bool {
	return slices.ContainsFunc(markers, func(m string) bool {
		return bytes.Contains(stderr, []byte(m)) && !bytes.Contains(output, []byte(m))
	})
}

// finishJudged sets a judged job's verdict, score, status, reason, usage
// and provenance from its cases.
func (h *Handler) finishJudged(ctx context.Context, job jobs.Job, res *jobs.Result, spec sandbox.Spec) {
	res.FinishedAt = time.Now().UTC()
	score := 0.0
	if res.Verdict == jobs.VerdictCompileError {
		res.Status = jobs.StatusCompileError
		res.Reason = "compile_error: the program did not compile"
	} else {
		res.Verdict, score = judge.Summarize(res.Cases)
		res.Status = res.Verdict.Status()
		res.Reason = ""
		var u jobs.Usage
		for i, c := range res.Cases {
			u.CPUMS += c.CPUMS
			u.WallMS += c.WallMS
			u.MaxRSSKB = max(u.MaxRSSKB, c.MaxRSSKB)
			if res.Reason == "" && c.Verdict != jobs.VerdictAccepted && c.Verdict != jobs.VerdictSkipped {
				res.Reason = fmt.Sprintf("case %d: %s", i+1, c.Verdict)
				if c.Detail != "" {
					res.Reason += ": " + c.Detail
				}
			}
		}
		res.Usage = u
		res.Output, res.ExitCode, res.Signal = jobs.Output{}, nil, ""
	}
	res.Score = &score
	res.Provenance = h.provenance(ctx, job, spec)
}

// provenance is what a judged job ran on.
func (h *Handler) provenance(ctx context.Context, job jobs.Job, spec sandbox.Spec) *jobs.Provenance {
	p := &jobs.Provenance{Limits: job.Limits, Worker: h.cfg.Worker, CPUModel: cpuModel(), CPUs: runtime.NumCPU(),
		Environment: job.Environment}
	p.Image, _ = h.imageIDs.get(ctx, h.cfg.Sandbox, spec.Image)
	if hash, ok := h.envHashes.Load(spec.Image); ok {
		p.Recipe = hash.(string)
	}
	if vs, err := h.cfg.Store.LangVersions(ctx); err == nil {
		if v, ok := vs[job.Lang]; ok && (v.ImageID == "" || v.ImageID == p.Image) {
			p.Toolchain = v.Version
		}
	}
	p.Load1 = load1()
	p.CPUShared = p.Load1 > float64(p.CPUs)
	return p
}

var cpuModel = sync.OnceValue(func() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
})

// load1 is the machine's one-minute load average (0 if unknown).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// caseCanceled ends a judged job whose case was stopped: requeued at a
// shutdown, canceled at a cancel request.
func (h *Handler) caseCanceled(ctx context.Context, job jobs.Job, res *jobs.Result) (outcome, error) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrShutdown):
		return outcomeRequeued, ErrShutdown
	case errors.Is(cause, ErrCanceled):
	default:
		if canceled, _ := h.cfg.Store.CancelRequested(context.WithoutCancel(ctx), job.ID); !canceled {
			return outcomeInfra, fmt.Errorf("worker: run interrupted: %w", cause)
		}
	}
	res.Status, res.Reason = jobs.StatusCanceled, "canceled while running"
	res.FinishedAt = time.Now().UTC()
	return outcomeFinal, nil
}
