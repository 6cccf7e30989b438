package jobs

import "errors"

var (
	// ErrNotFound means no job with that ID is known: no result is
	// stored (or it expired) and no task with the ID is in any queue.
	ErrNotFound = errors.New("jobs: job not found")

	// ErrAlreadyFinal means the job already has a final result, so it can
	// no longer be canceled.
	ErrAlreadyFinal = errors.New("jobs: job already has a final result")
)

// ErrSessionExists: a session of this ID exists (or existed within
// SessionRetention).
var ErrSessionExists = errors.New("a session with this ID exists")
