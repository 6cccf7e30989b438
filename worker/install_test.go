package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
)

func TestInstallFailureReason(t *testing.T) {
	t.Parallel()
	see := " (the installer's output is in install.step)"
	for _, tt := range []struct {
		st   agent.StepResult
		want string
	}{
		{agent.StepResult{Name: "install", Started: true, ExitCode: 1},
			"installing libraries failed: pip exited with status 1" + see},
		{agent.StepResult{Name: "install", Started: true, ExitCode: -1, TimedOut: true},
			"installing libraries failed: pip exceeded the install time limit of 5m0s" + see},
		{agent.StepResult{Name: "install", Started: true, ExitCode: -1, Signal: 9, OOMKilled: true},
			"installing libraries failed: pip was killed by the OOM killer" + see},
		{agent.StepResult{Name: "install", Error: "exec: \"python3\": not found"},
			"installing libraries failed: pip could not start: exec: \"python3\": not found"},
	} {
		require.Equal(t, tt.want, installFailure("pip", tt.st, "", 5*time.Minute))
	}
	require.Equal(t, "installing libraries failed: the installed libraries take 4096 KiB on disk, over the cap of 1024 KiB",
		installFailure("pip", agent.StepResult{Name: "install", Started: true}, "the installed libraries take 4096 KiB on disk, over the cap of 1024 KiB", 5*time.Minute))
}
