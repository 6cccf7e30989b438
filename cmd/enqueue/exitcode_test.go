package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

func TestExitCode(t *testing.T) {
	t.Parallel()

	code := func(n int) *int { return &n }
	tests := []struct {
		name string
		r    jobs.Result
		want int
	}{
		{"succeeded", jobs.Result{Status: jobs.StatusSucceeded, ExitCode: code(0)}, 0},
		{"failed with its exit code", jobs.Result{Status: jobs.StatusFailed, ExitCode: code(3)}, 3},
		{"failed with exit 255", jobs.Result{Status: jobs.StatusFailed, ExitCode: code(255)}, 255},
		{"failed by a signal, no exit code", jobs.Result{Status: jobs.StatusFailed, Signal: "SIGSEGV"}, 1},
		{"failed with exit 0 (inconsistent)", jobs.Result{Status: jobs.StatusFailed, ExitCode: code(0)}, 1},
		{"failed with exit 256 (out of range)", jobs.Result{Status: jobs.StatusFailed, ExitCode: code(256)}, 1},
		{"failed with a negative exit code", jobs.Result{Status: jobs.StatusFailed, ExitCode: code(-1)}, 1},
		{"compile_error", jobs.Result{Status: jobs.StatusCompileError}, 1},
		{"timeout", jobs.Result{Status: jobs.StatusTimeout, Signal: "SIGKILL"}, 124},
		{"oom", jobs.Result{Status: jobs.StatusOOM, Signal: "SIGKILL"}, 137},
		{"output_limit", jobs.Result{Status: jobs.StatusOutputLimit}, 3},
		{"canceled", jobs.Result{Status: jobs.StatusCanceled}, 130},
		{"rejected", jobs.Result{Status: jobs.StatusRejected}, 64},
		{"internal_error", jobs.Result{Status: jobs.StatusInternalError}, 70},
		{"queued (never from Wait)", jobs.Result{Status: jobs.StatusQueued}, 70},
		{"unknown status", jobs.Result{Status: "exploded"}, 70},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, exitCode(tt.r))
		})
	}
}

// Every final status has a documented exit status.
func TestExitCodeCoversFinalStatuses(t *testing.T) {
	t.Parallel()

	for _, s := range []jobs.Status{
		jobs.StatusSucceeded, jobs.StatusFailed, jobs.StatusCompileError, jobs.StatusTimeout, jobs.StatusOOM,
		jobs.StatusOutputLimit, jobs.StatusRejected, jobs.StatusCanceled, jobs.StatusInternalError,
	} {
		require.True(t, s.Final(), s)
		require.Contains(t, exitStatusHelp, string(s))
	}
}
