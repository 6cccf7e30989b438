package sandbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// TestImagesHaveNoSetuidFiles: no file of any language image is setuid or
// setgid (scripts/images.sh clears the bits in the final layer), so a
// program could not gain privileges even without no-new-privileges. Podman
// holds copies of the same images (same IDs), so one engine suffices.
func TestImagesHaveNoSetuidFiles(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, "docker")
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, MinIdle: -1, MaxTotal: 1, ReconcileInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close(context.Background()) })
	lim := testLimits(jobs.Limits{})
	for _, l := range langs.All() {
		t.Run(l.Name, func(t *testing.T) {
			spec := sandbox.Spec{Image: l.Image(""), Limits: lim.Container}
			res, err := pool.RunOnce(context.Background(), spec, &agent.RunRequest{Steps: []agent.Step{{
				Name: "find", Timeout: lim.Timeout, OutputLimit: 1 << 20, Rlimits: lim.Rlimits,
				Argv: []string{"/bin/sh", "-c", "find / -xdev -type f -perm /6000 2>/dev/null; echo done"},
			}}})
			require.NoError(t, err)
			st := res.Last()
			require.True(t, st.OK(), "stderr: %s", stderr(st))
			require.Equal(t, "done", strings.TrimSpace(stdout(st)), "setuid or setgid files in %s", l.Image(""))
		})
	}
}
