package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/batch"
	"github.com/sandq/sandq/jobs"
)

// batchFlags are the flags `batch` and `eval` share.
type batchFlags struct {
	out              string
	queue            string
	idPrefix         string
	chunk            int
	progress         string
	progressInterval time.Duration
}

func (f *batchFlags) register(cmd *cobra.Command, idPrefix string) {
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "out", "o", "", `results file, JSON lines, appended to as jobs finish and read first to resume ("-": stdout, no resume) (required)`)
	fl.StringVar(&f.queue, "queue", string(jobs.QueueBatch), "queue of the jobs that do not name one: critical, default or batch")
	fl.StringVar(&f.idPrefix, "id-prefix", idPrefix, "prefix of the IDs derived for jobs without one; change it to run the same input again as new jobs")
	fl.IntVar(&f.chunk, "chunk", 500, "jobs per enqueue round trip")
	fl.StringVar(&f.progress, "progress", "auto", "progress display on stderr: auto (a bar on a terminal, plain lines otherwise), bar, plain or none")
	fl.DurationVar(&f.progressInterval, "progress-interval", 10*time.Second, "time between plain progress lines")
	_ = cmd.MarkFlagRequired("out")
}

func (f *batchFlags) check() error {
	switch {
	case f.out == "":
		return errors.New("--out is required")
	case !slices.Contains(jobs.Queues(), jobs.Queue(f.queue)):
		return fmt.Errorf("--queue %q: want critical, default or batch", f.queue)
	case f.idPrefix != "" && !jobs.ValidID(f.idPrefix):
		return fmt.Errorf("--id-prefix %q: use the characters of job IDs, [A-Za-z0-9_.:-]", f.idPrefix)
	case len(f.idPrefix) > 64:
		return fmt.Errorf("--id-prefix is over 64 bytes")
	case f.chunk < 1:
		return fmt.Errorf("--chunk must be at least 1")
	case !slices.Contains([]string{"auto", "bar", "plain", "none"}, f.progress):
		return fmt.Errorf("--progress %q: want auto, bar, plain or none", f.progress)
	case f.progressInterval <= 0:
		return fmt.Errorf("--progress-interval must be positive")
	}
	return nil
}

func (a *app) newBatchCmd() *cobra.Command {
	var (
		f           batchFlags
		in          string
		skipInvalid bool
	)
	cmd := &cobra.Command{
		Use:   "batch --in JOBS.jsonl --out RESULTS.jsonl",
		Short: "Run a JSON-lines file of jobs and collect their results, resumably",
		Long: `Enqueue every job of --in (one jobs.Job JSON object per line, as for
run --job-json) and write each job's Result to --out as one JSON line, as
jobs finish. Jobs that name no queue go to the batch queue (--queue).

Input lines are decoded strictly (unknown fields are errors) and validated
before anything is enqueued. By default one bad line stops the batch before
it starts, listing the bad lines by number (exit 64); with --skip-invalid
the bad lines are reported and skipped, and the rest runs. Blank lines are
ignored. Two lines with the same "id" are an error.

Resuming. A line without an "id" gets one derived from its content:
--id-prefix + a hash of the job's JSON and of how many identical lines came
before it. So running the same command again maps every line to the same
job: jobs whose results are already in --out are skipped (a truncated last
line, left by a crash, is dropped and its job fetched again); jobs already
final in Redis (kept for the result TTL) are written to --out without being
run again; jobs enqueued by an interrupted run are awaited, not enqueued
twice. No result is written twice. Identical lines in two different input
files share jobs within the result TTL; give another --id-prefix to run an
input afresh.

Progress goes to stderr: a bar on a terminal, otherwise a line every
--progress-interval; a summary follows (results per status, wall time,
jobs/s). Ctrl-C stops collecting; the enqueued jobs go on, and rerunning
the command picks them up.

Exit status: 0 when every job has its result in --out, whatever the jobs'
statuses; 64 for invalid input lines (without --skip-invalid); 2 for usage,
Redis or file errors; 130 when interrupted.`,
		Example: `  enqueue batch --in jobs.jsonl --out results.jsonl
  enqueue batch --in jobs.jsonl --out results.jsonl --skip-invalid --progress plain
  jq -c 'select(.status != "succeeded")' results.jsonl`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" {
				return usageError(cmd, errors.New("--in is required"))
			}
			if err := f.check(); err != nil {
				return usageError(cmd, err)
			}
			return a.runBatchCmd(cmd, &f, in, skipInvalid)
		},
	}
	cmd.Flags().SortFlags = false
	cmd.Flags().StringVarP(&in, "in", "i", "", `jobs file, one jobs.Job JSON object per line ("-": stdin) (required)`)
	f.register(cmd, "b-")
	cmd.Flags().BoolVar(&skipInvalid, "skip-invalid", false, "skip invalid input lines (reported on stderr) instead of refusing to start")
	_ = cmd.MarkFlagRequired("in")
	return cmd
}

func (a *app) runBatchCmd(cmd *cobra.Command, f *batchFlags, in string, skipInvalid bool) error {
	var r io.Reader = a.stdin
	if in != "-" {
		file, err := os.Open(in)
		if err != nil {
			return &exitError{code: exitCLI, err: fmt.Errorf("--in: %w", err)}
		}
		defer file.Close()
		r = file
	}
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	lines, bad, err := batch.ReadJobs(r, jobs.Queue(f.queue), batch.NewIDs(f.idPrefix), c.Validate)
	if err != nil {
		return &exitError{code: exitCLI, err: fmt.Errorf("--in %s: %w", in, err)}
	}
	if len(bad) > 0 {
		reportBadLines(a.stderr, in, bad, skipInvalid)
		if !skipInvalid {
			return &exitError{code: exitRejected, err: fmt.Errorf("%s: %d invalid lines; nothing was enqueued (fix them, or pass --skip-invalid to run the rest)", in, len(bad))}
		}
	}

	// What --out holds already.
	inInput := make(map[string]bool, len(lines))
	for _, l := range lines {
		inInput[l.Job.ID] = true
	}
	st := newBatchStatus(len(lines))
	foreign := 0
	out, err := openResults(f.out, a.stdout, func(_ int, b []byte) error {
		var r struct {
			ID     string      `json:"id"`
			Status jobs.Status `json:"status"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
			return errors.New("not a result (a JSON object with an id)")
		}
		switch {
		case !inInput[r.ID]:
			foreign++
		case !st.seen(r.ID, r.Status):
			return fmt.Errorf("a second result for job %s", r.ID)
		}
		return nil
	})
	if err != nil {
		return &exitError{code: exitCLI, err: err}
	}
	defer out.Close()
	if out.dropped > 0 {
		fmt.Fprintf(a.stderr, "enqueue: batch: dropped a truncated last line (%d bytes) from %s; its job is fetched again\n", out.dropped, f.out)
	}
	if foreign > 0 {
		fmt.Fprintf(a.stderr, "enqueue: batch: %s holds %d results of jobs not in %s; they are kept\n", f.out, foreign, in)
	}

	var todo []jobs.Job
	for _, l := range lines {
		if !st.done[l.Job.ID] {
			todo = append(todo, l.Job)
		}
	}
	emit := func(r jobs.Result) error {
		b, err := jobs.EncodeJSON(r)
		if err != nil {
			return err
		}
		if err := out.writeLine(b); err != nil {
			return err
		}
		st.seen(r.ID, r.Status)
		return nil
	}
	res, err := a.runJobs(cmd, c, f, "batch", len(lines), todo, emit)
	if err != nil {
		return err
	}
	st.writeSummary(a.stderr, in, f.out, len(bad), res)
	return a.batchEnd(cmd, res)
}

func reportBadLines(w io.Writer, in string, bad []batch.LineError, skipping bool) {
	const maxShown = 20
	verb := "invalid"
	if skipping {
		verb = "skipped invalid"
	}
	for i, e := range bad {
		if i == maxShown {
			fmt.Fprintf(w, "enqueue: batch: ... and %d more invalid lines\n", len(bad)-maxShown)
			break
		}
		fmt.Fprintf(w, "enqueue: batch: %s:%d: %s: %v\n", in, e.N, verb, e.Err)
	}
}

// batchStatus counts the results of a batch's input that --out holds.
type batchStatus struct {
	total    int
	done     map[string]bool
	byStatus map[jobs.Status]int
}

func newBatchStatus(total int) *batchStatus {
	return &batchStatus{total: total, done: map[string]bool{}, byStatus: map[jobs.Status]int{}}
}

// seen records a result; false if the job had one already.
func (s *batchStatus) seen(id string, st jobs.Status) bool {
	if s.done[id] {
		return false
	}
	s.done[id] = true
	s.byStatus[st]++
	return true
}

func (s *batchStatus) writeSummary(w io.Writer, in, out string, invalid int, res runOutcome) {
	var b strings.Builder
	fmt.Fprintf(&b, "batch: %s: %d jobs", in, s.total)
	if invalid > 0 {
		fmt.Fprintf(&b, " (%d invalid lines skipped)", invalid)
	}
	fmt.Fprintf(&b, "; %d already had results in %s; this run wrote %d (%d found final in Redis, not run again)\n",
		res.already, out, res.written, res.counts.FromRedis)
	fmt.Fprintf(&b, "batch: %s: %d of %d results: %s\n", out, len(s.done), s.total, statusCounts(s.byStatus))
	fmt.Fprintf(&b, "batch: wall %s, %.1f jobs/s\n", res.wall.Round(time.Millisecond), res.rate())
	_, _ = io.WriteString(w, b.String())
}

// statusCounts formats counts per status, succeeded first, then by name.
func statusCounts(m map[jobs.Status]int) string {
	keys := make([]jobs.Status, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b jobs.Status) int {
		switch {
		case a == b:
			return 0
		case a == jobs.StatusSucceeded:
			return -1
		case b == jobs.StatusSucceeded:
			return 1
		}
		return strings.Compare(string(a), string(b))
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
