package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandq/sandq/client"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/batch"
	"github.com/sandq/sandq/jobs"
)

// runOutcome is what one run of a batch did.
type runOutcome struct {
	counts  batch.Counts
	already int // jobs whose results were in --out before
	written int // results written by this run
	wall    time.Duration
	// stopped is why the run ended early (an *interruptedError for
	// Ctrl-C), nil if it completed.
	stopped error
}

func (o runOutcome) rate() float64 {
	if o.wall <= 0 {
		return 0
	}
	return float64(o.written) / o.wall.Seconds()
}

// tickerFunc makes the plain progress ticker; tests replace it.
var tickerFunc = func(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// runJobs runs todo through batch.Run with progress on stderr. total is
// every job of the input, total-len(todo) of them done before. emit
// writes one result. The returned error is for faults that stop the run
// (Redis, the results file); an interruption is reported in stopped.
func (a *app) runJobs(cmd *cobra.Command, c *client.Client, f *batchFlags, what string, total int, todo []jobs.Job, emit func(jobs.Result) error) (runOutcome, error) {
	res := runOutcome{already: total - len(todo)}
	if len(todo) == 0 {
		return res, nil
	}
	label := what
	if res.already > 0 {
		label = fmt.Sprintf("%s (%d done before)", what, res.already)
	}
	var p progress = noProgress{}
	mode := f.progress
	if mode == "auto" {
		mode = "plain"
		if isTerminalWriter(a.stderr) {
			mode = "bar"
		}
	}
	switch mode {
	case "bar":
		p = newBarProgress(a.stderr, label, len(todo))
	case "plain":
		tick, stop := tickerFunc(f.progressInterval)
		defer stop()
		p = newPlainProgress(a.stderr, label, len(todo), tick, time.Now)
	}

	start := time.Now()
	var err error
	res.counts, err = batch.Run(cmd.Context(), c, batch.Config{Chunk: f.chunk}, todo, func(r jobs.Result) error {
		if err := emit(r); err != nil {
			return err
		}
		res.written++
		p.add(r)
		return nil
	})
	res.wall = time.Since(start)
	p.finish()
	if cause := context.Cause(cmd.Context()); errors.As(cause, new(*interruptedError)) {
		res.stopped = cause
		return res, nil
	}
	if err != nil {
		return res, a.failure(cmd, err)
	}
	return res, nil
}

// batchEnd is the command's outcome once the summary is written.
func (a *app) batchEnd(cmd *cobra.Command, res runOutcome) error {
	var ie *interruptedError
	if errors.As(res.stopped, &ie) {
		fmt.Fprintf(a.stderr, "enqueue: %v after %d results; the enqueued jobs go on running. Run the same command again to resume.\n", ie, res.written)
		return &exitError{code: ie.code()}
	}
	return nil
}

// isTerminalWriter reports whether w is a terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}
