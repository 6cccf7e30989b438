package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandq/sandq/client"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/jobs"
)

// errWaitTimeout is the cancel cause when --timeout / --wait-timeout
// expires.
var errWaitTimeout = errors.New("wait timeout expired")

func (a *app) newWaitCmd() *cobra.Command {
	var (
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for a job and mirror its outcome",
		Long: `Block until job ID ends (at once if it already has), then print the
program's stdout and stderr byte for byte to this command's stdout and
stderr, followed by one status line on stderr, and exit with a status that
mirrors the job's. With --json, print the Result as JSON on stdout instead.
Waiting does not poll: it subscribes to the job's done channel.

Ctrl-C stops waiting; the job goes on.

` + exitStatusHelp,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			return a.await(cmd, c, args[0], asJSON, timeout)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the Result as JSON on stdout, and nothing else there")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long (exit 75; the job goes on); 0 waits as long as it takes")
	return cmd
}

// await waits for job id with c, prints its Result and returns the exit
// error mirroring it. timeout > 0 bounds the wait.
func (a *app) await(cmd *cobra.Command, c *client.Client, id string, asJSON bool, timeout time.Duration) error {
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errWaitTimeout)
		defer cancel()
	}
	if a.waitHook != nil {
		a.waitHook(id)
	}
	r, err := c.Wait(ctx, id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return a.notFound(id)
	case err != nil && ctx.Err() != nil:
		return a.stoppedWaiting(cmd, c, id, asJSON, context.Cause(ctx))
	case err != nil:
		return a.failure(cmd, err)
	}
	return a.printResult(r, asJSON)
}

// stoppedWaiting reports a wait that ended before the job, and how to pick
// it up again. If the job ended just then after all, its Result is printed
// as if the wait had seen it.
func (a *app) stoppedWaiting(cmd *cobra.Command, c *client.Client, id string, asJSON bool, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
	defer cancel()
	state := "has not ended"
	if r, err := c.Get(ctx, id); err == nil {
		if r.Status.Final() {
			return a.printResult(r, asJSON)
		}
		state = "is still " + string(r.Status)
	}
	fmt.Fprintf(a.stderr, "enqueue: stopped waiting for job %s (%v); it %s and was not canceled\n", id, cause, state)
	fmt.Fprintf(a.stderr, "enqueue: to wait again: %s\n", resumeCommand(cmd, "wait", id))
	fmt.Fprintf(a.stderr, "enqueue: to cancel it:  %s\n", resumeCommand(cmd, "cancel", id))
	if ie, ok := errors.AsType[*interruptedError](cause); ok {
		return &exitError{code: ie.code()}
	}
	return &exitError{code: exitStillPending}
}

// notFound is the error for an unknown job ID.
func (a *app) notFound(id string) error {
	return &exitError{code: exitCLI, err: fmt.Errorf("job %s not found (prefix %q, redis %s db %d); results expire after their TTL",
		id, a.globals.Prefix, a.globals.Addr, a.globals.DB)}
}

// printResult prints a final Result, as JSON or as the program's own
// output plus a status line, and returns the exit error mirroring it.
func (a *app) printResult(r jobs.Result, asJSON bool) error {
	code := exitCode(r)
	if asJSON {
		if err := writeJSON(a.stdout, r); err != nil {
			return err
		}
		return &exitError{code: code}
	}
	if err := writeOutput(a.stdout, a.stderr, r); err != nil {
		return err
	}
	return &exitError{code: code}
}

// writeOutput writes what a job printed: the compile step's output (to
// stderr: it is not the program's), the program's stdout and stderr byte
// for byte, notes on truncation and artifacts, then the status line, on
// stderr.
func writeOutput(stdout, stderr io.Writer, r jobs.Result) error {
	// A failed install's output goes first, to stderr: it is why the
	// program did not run.
	if in := r.Install; in != nil && in.Step != nil && r.Status == jobs.StatusFailed && r.ExitCode == nil {
		if err := writeStep(stderr, in.Step); err != nil {
			return fmt.Errorf("job %s: install output: %w", r.ID, err)
		}
	}
	if r.Compile != nil {
		if err := writeStep(stderr, r.Compile); err != nil {
			return fmt.Errorf("job %s: compile output: %w", r.ID, err)
		}
	}
	out, err := r.StdoutBytes()
	if err != nil {
		return fmt.Errorf("job %s: stdout: %w", r.ID, err)
	}
	errb, err := r.StderrBytes()
	if err != nil {
		return fmt.Errorf("job %s: stderr: %w", r.ID, err)
	}
	if _, err := stdout.Write(out); err != nil {
		return err
	}
	if _, err := stderr.Write(errb); err != nil {
		return err
	}
	return writeNotes(stderr, r, lastByte(out, errb), len(out), len(errb), nil)
}

// writeNotes writes, on stderr after a job's output, the notes on its
// result and the status line. last is the last byte of output written (0:
// none), outLen and errLen how much of each stream was shown; extra notes
// come first.
func writeNotes(stderr io.Writer, r jobs.Result, last byte, outLen, errLen int, extra []string) error {
	var notes strings.Builder
	// The notes and the status line start on a line of their own, in
	// plain text: a program's output that ends without a newline, or
	// leaves the terminal in some mode (hidden text, colours), must not
	// join or hide them; a line it prints that looks like ours is then
	// never the last one a person sees.
	if isTerminalWriter(stderr) {
		notes.WriteString("\x1b[0m")
	}
	if last != 0 && last != '\n' {
		notes.WriteString("\n")
	}
	for _, n := range extra {
		notes.WriteString("sandq: " + n + "\n")
	}
	if r.StdoutTruncated {
		fmt.Fprintf(&notes, "sandq: stdout truncated: %d of %d bytes kept (--output-bytes)\n", outLen, r.StdoutTotalBytes)
	}
	if r.StderrTruncated {
		fmt.Fprintf(&notes, "sandq: stderr truncated: %d of %d bytes kept (--output-bytes)\n", errLen, r.StderrTotalBytes)
	}
	for _, art := range r.Artifacts {
		switch art.Name {
		case r.StdoutArtifact:
			fmt.Fprintf(&notes, "sandq: stdout: the first %d bytes above; all %d bytes kept: %s\n", outLen, art.Size, cmp.Or(art.URL, art.Key))
		case r.StderrArtifact:
			fmt.Fprintf(&notes, "sandq: stderr: the first %d bytes above; all %d bytes kept: %s\n", errLen, art.Size, cmp.Or(art.URL, art.Key))
		default:
			fmt.Fprintf(&notes, "sandq: artifact %s (%d bytes): %s\n", art.Name, art.Size, cmp.Or(art.URL, art.Key))
		}
	}
	if in := r.Install; in != nil && (r.Status != jobs.StatusFailed || r.ExitCode != nil) {
		if in.Cached {
			fmt.Fprintf(&notes, "sandq: libraries already installed (%d ms)\n", in.TookMS)
		} else {
			fmt.Fprintf(&notes, "sandq: libraries installed in %d ms\n", in.TookMS)
		}
	}
	for _, why := range r.DroppedArtifacts {
		fmt.Fprintf(&notes, "sandq: artifact left out: %s\n", why)
	}
	for _, msg := range r.ArtifactErrors {
		fmt.Fprintf(&notes, "sandq: artifact error: %s\n", msg)
	}
	notes.WriteString(statusLine(r))
	_, err := io.WriteString(stderr, notes.String())
	return err
}

// lastByte is the last byte written of out then errb (stderr is written
// after stdout), or 0 when both are empty.
func lastByte(out, errb []byte) byte {
	switch {
	case len(errb) > 0:
		return errb[len(errb)-1]
	case len(out) > 0:
		return out[len(out)-1]
	}
	return 0
}

// writeStep writes a step's stdout, then its stderr, to w.
func writeStep(w io.Writer, st *jobs.StepResult) error {
	for _, get := range []func() ([]byte, error){st.StdoutBytes, st.StderrBytes} {
		b, err := get()
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// statusLine is the one-line summary of a Result written after the
// program's output: "sandq: job ID STATUS (exit N, W ms wall): REASON\n",
// the parenthesis and the reason only when there is something to say.
func statusLine(r jobs.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandq: job %s %s", r.ID, r.Status)
	var details []string
	if r.ExitCode != nil {
		details = append(details, fmt.Sprintf("exit %d", *r.ExitCode))
	}
	if r.Signal != "" {
		details = append(details, "signal "+r.Signal)
	}
	if r.Usage.WallMS > 0 {
		details = append(details, fmt.Sprintf("%d ms wall", r.Usage.WallMS))
	}
	if r.Attempts > 1 {
		details = append(details, fmt.Sprintf("attempt %d", r.Attempts))
	}
	if len(details) > 0 {
		b.WriteString(" (" + strings.Join(details, ", ") + ")")
	}
	if r.Reason != "" {
		b.WriteString(": " + r.Reason)
	}
	b.WriteByte('\n')
	return b.String()
}
