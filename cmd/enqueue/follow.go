package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandq/sandq/client"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/jobs"
)

func (a *app) newLogsCmd() *cobra.Command {
	var (
		follow  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's output, live with --follow",
		Long: `Print job ID's output: the program's stdout to stdout and its stderr to
stderr, byte for byte, the compile step's output to stderr.

A job enqueued with live output (run --follow, or "stream": true, or a
worker with --stream-all) has its output in Redis while it runs: logs
prints what is there now, and with --follow keeps printing as it arrives
until the job ends, then the status line, and exits with a status that
mirrors the job's. A job without live output (or whose live output has
expired) prints its Result's output once it has ended; with --follow logs
waits for that.

Without --follow, a job still running exits 0 after what it has printed so
far; an ended job exits mirroring it.

` + exitStatusHelp,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			if follow {
				return a.follow(cmd, c, args[0], timeout)
			}
			entries, err := c.StreamRange(cmd.Context(), args[0], "")
			switch {
			case errors.Is(err, jobs.ErrNotFound):
				return a.notFound(args[0])
			case err != nil:
				return a.failure(cmd, err)
			}
			p := &livePrinter{stdout: a.stdout, stderr: a.stderr}
			for _, e := range entries {
				if e.End() {
					return a.finishLive(cmd, c, args[0], p)
				}
				if err := p.print(e); err != nil {
					return err
				}
			}
			if p.last != 0 && p.last != '\n' {
				fmt.Fprintln(a.stderr)
			}
			fmt.Fprintf(a.stderr, "sandq: job %s has not ended; to follow it: %s\n", args[0], resumeCommand(cmd, "logs --follow", args[0]))
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing the output as it arrives until the job ends")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --follow, give up after this long (exit 75; the job goes on)")
	return cmd
}

// follow prints job id's live output as it arrives, then the notes and
// status line of its Result, and returns the exit error mirroring it.
func (a *app) follow(cmd *cobra.Command, c *client.Client, id string, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errWaitTimeout)
		defer cancel()
	}
	if a.waitHook != nil {
		a.waitHook(id)
	}
	p := &livePrinter{stdout: a.stdout, stderr: a.stderr}
	for e, err := range c.Stream(ctx, id, "") {
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			return a.notFound(id)
		case err != nil && ctx.Err() != nil:
			if p.last != 0 && p.last != '\n' {
				fmt.Fprintln(a.stderr)
			}
			return a.stoppedWaiting(cmd, c, id, false, context.Cause(ctx))
		case err != nil:
			return a.failure(cmd, err)
		}
		if e.End() {
			return a.finishLive(cmd, c, id, p)
		}
		if err := p.print(e); err != nil {
			return err
		}
	}
	return a.failure(cmd, fmt.Errorf("job %s: live output ended without its end", id))
}

// finishLive prints the notes and status line of job id's final Result
// after its live output, and returns the exit error mirroring it.
func (a *app) finishLive(cmd *cobra.Command, c *client.Client, id string, p *livePrinter) error {
	r, err := c.Get(context.WithoutCancel(cmd.Context()), id)
	if err != nil {
		return a.failure(cmd, err)
	}
	if err := writeNotes(a.stderr, r, p.last, int(p.shown["run/stdout"]), int(p.shown["run/stderr"]), p.notes()); err != nil {
		return err
	}
	return &exitError{code: exitCode(r)}
}

// livePrinter writes live output entries where they belong (the run's
// stdout to stdout, everything else to stderr) and keeps what the notes
// after it must say: gaps, limits, restarted attempts.
type livePrinter struct {
	stdout, stderr io.Writer
	attempt        int
	last           byte
	shown          map[string]int64 // step/stream: bytes printed
	next           map[string]int64 // step/stream: offset expected next
	dropped        map[string]int64
	limited        map[string]bool
	fromResult     bool
	restarts       int
}

func (p *livePrinter) print(e jobs.StreamEntry) error {
	if p.shown == nil {
		p.shown, p.next, p.dropped, p.limited = map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]bool{}
	}
	if e.Attempt > p.attempt && p.attempt != 0 {
		// A retried attempt runs the steps again from the start.
		p.restarts++
		clear(p.next)
		clear(p.limited)
		if p.last != 0 && p.last != '\n' {
			fmt.Fprintln(p.stderr)
		}
		fmt.Fprintf(p.stderr, "sandq: attempt %d (after an infrastructure fault) runs the program again; its output follows\n", e.Attempt)
		p.last = '\n'
	}
	p.attempt = max(p.attempt, e.Attempt)
	key := e.Step + "/" + e.Stream
	if e.FromResult {
		p.fromResult = true
	} else {
		if e.Offset < p.next[key] {
			return nil // already printed (a stream read twice)
		}
		p.dropped[key] += e.Offset - p.next[key]
		p.next[key] = e.Offset + int64(len(e.Data))
	}
	if e.Limit {
		p.limited[key] = true
	}
	if len(e.Data) == 0 {
		return nil
	}
	w := p.stderr
	if key == "run/stdout" {
		w = p.stdout
	}
	if _, err := w.Write(e.Data); err != nil {
		return err
	}
	p.shown[key] += int64(len(e.Data))
	p.last = e.Data[len(e.Data)-1]
	return nil
}

// notes says what the live output left out.
func (p *livePrinter) notes() []string {
	var out []string
	for _, key := range []string{"compile/stdout", "compile/stderr", "run/stdout", "run/stderr"} {
		if n := p.dropped[key]; n > 0 {
			out = append(out, fmt.Sprintf("%s: %d bytes were not shown live (the reader or Redis fell behind); `enqueue status` has the result", key, n))
		}
		if p.limited[key] {
			out = append(out, fmt.Sprintf("%s reached --output-bytes: the rest was not shown live; the result keeps its head and tail", key))
		}
	}
	if p.fromResult {
		out = append(out, "no live output was kept for this job: the output above is its result's")
	}
	return out
}
