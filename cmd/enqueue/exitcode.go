package main

import "github.com/sandq/sandq/jobs"

// Exit statuses. A job's final status maps to one in exitCode; the rest
// are the CLI's own.
const (
	exitOK           = 0
	exitFailed       = 1   // failed without an exit code of its own; compile_error
	exitCLI          = 2   // usage, configuration, Redis, unknown job ID
	exitOutputLimit  = 3   // output_limit
	exitRejected     = 64  // rejected, or invalid here before Redis was touched
	exitInternal     = 70  // internal_error; an unknown status
	exitStillPending = 75  // gave up waiting (--timeout); the job goes on
	exitTimeout      = 124 // timeout, as timeout(1)
	exitCanceled     = 130 // canceled; Ctrl-C while waiting is 130 too (128+SIGINT)
	exitOOM          = 137 // oom, as a shell reports SIGKILL
)

// exitStatusHelp documents exitCode and the CLI's own statuses for the
// long help of the commands that mirror a job.
const exitStatusHelp = `Exit status, when the command waits for the job (run --wait, wait):
  0        succeeded
  1-255    failed: the program's own exit code; 1 if it had none (killed by
           a signal)
  1        compile_error
  3        output_limit
  64       rejected: the job is invalid (run checks it before touching
           Redis) or a worker refused it
  70       internal_error: infrastructure failed and retries are spent
  124      timeout, as timeout(1)
  130      canceled
  137      oom
The CLI's own:
  0        run without --wait: the job was enqueued, or already existed
  2        usage or configuration error, Redis unreachable, unknown job ID
  75       wait --timeout / run --wait-timeout expired: the job goes on
  130      interrupted by Ctrl-C (143 for SIGTERM) while waiting: the job
           goes on; resume with "enqueue wait ID", stop it with
           "enqueue cancel ID"
A failed program's own code can equal a status code above (exit 124 from
the program itself reads like a timeout); use --json to tell them apart.`

// exitCode maps a job's final Result to the CLI's exit status; see
// exitStatusHelp. A non-final or unknown status maps to exitInternal:
// Wait returns only final Results, so seeing one here is a bug or a newer
// worker.
func exitCode(r jobs.Result) int {
	switch r.Status {
	case jobs.StatusSucceeded:
		return exitOK
	case jobs.StatusFailed:
		if r.ExitCode != nil && *r.ExitCode >= 1 && *r.ExitCode <= 255 {
			return *r.ExitCode
		}
		return exitFailed
	case jobs.StatusCompileError:
		return exitFailed
	case jobs.StatusTimeout:
		return exitTimeout
	case jobs.StatusOOM:
		return exitOOM
	case jobs.StatusOutputLimit:
		return exitOutputLimit
	case jobs.StatusCanceled:
		return exitCanceled
	case jobs.StatusRejected:
		return exitRejected
	}
	return exitInternal
}
