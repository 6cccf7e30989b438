package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/jobs"
)

func (a *app) newStatusCmd() *cobra.Command {
	var short bool
	cmd := &cobra.Command{
		Use:   "status ID",
		Short: "Print a job's Result as JSON",
		Long: `Print job ID's Result as JSON on stdout: the stored Result, refined by
asynq's view while the job is not final (queued, running; internal_error if
asynq gave up on it without a result). With --short, print only the status
word.

Exit status: 0 if the job is known, whatever its status; 2 if it is not
(never enqueued, or its result expired) or Redis cannot be reached.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.getResult(cmd, args[0])
			switch {
			case err != nil:
				return err
			case short:
				_, err = fmt.Fprintln(a.stdout, r.Status)
				return err
			}
			return writeJSON(a.stdout, r)
		},
	}
	cmd.Flags().BoolVar(&short, "short", false, "print only the status word")
	// JSON is what status prints anyway; accept --json like run and wait.
	cmd.Flags().Bool("json", true, "print the Result as JSON (the default)")
	_ = cmd.Flags().MarkHidden("json")
	return cmd
}

// getResult reads job id's Result; an unknown job or an unreachable Redis
// becomes the CLI's exit error.
func (a *app) getResult(cmd *cobra.Command, id string) (jobs.Result, error) {
	c, err := a.newClient()
	if err != nil {
		return jobs.Result{}, err
	}
	defer c.Close()
	r, err := c.Get(cmd.Context(), id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return r, a.notFound(id)
	case err != nil:
		return r, a.failure(cmd, err)
	}
	return r, nil
}

func (a *app) newCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running job",
		Long: `Cancel job ID and print what happened. A queued job is taken off its queue
and ends canceled at once. A running job is signalled: its worker kills the
program and stores the canceled Result with the output so far; use
"enqueue wait ID" to see it.

Exit status: 0 if the job is canceled, being canceled, or had already
finished (then its status is printed); 2 if the job is unknown or Redis
cannot be reached.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			before, err := c.Get(ctx, id)
			switch {
			case errors.Is(err, jobs.ErrNotFound):
				return a.notFound(id)
			case err != nil:
				return a.failure(cmd, err)
			case before.Status.Final():
				_, err = fmt.Fprintf(a.stdout, "job %s already finished with status %s\n", id, before.Status)
				return err
			}
			err = c.Cancel(ctx, id)
			switch {
			case errors.Is(err, jobs.ErrNotFound):
				return a.notFound(id)
			case err != nil && !errors.Is(err, jobs.ErrAlreadyFinal):
				return a.failure(cmd, err)
			}
			// Say where it stands now; the cancel is done even if this
			// read is interrupted.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			after, gerr := c.Get(rctx, id)
			switch {
			case gerr != nil && errors.Is(err, jobs.ErrAlreadyFinal):
				_, err = fmt.Fprintf(a.stdout, "job %s already finished\n", id)
			case gerr != nil:
				_, err = fmt.Fprintf(a.stdout, "job %s: cancel requested\n", id)
			case after.Status == jobs.StatusCanceled:
				_, err = fmt.Fprintf(a.stdout, "job %s canceled (%s)\n", id, cmp.Or(after.Reason, "canceled"))
			case after.Status.Final():
				_, err = fmt.Fprintf(a.stdout, "job %s already finished with status %s\n", id, after.Status)
			default:
				_, err = fmt.Fprintf(a.stdout, "job %s: cancel requested; it is %s and its worker will stop it (see: %s)\n",
					id, after.Status, resumeCommand(cmd, "wait", id))
			}
			return err
		},
	}
}
