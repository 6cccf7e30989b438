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

// TestGoBuildCacheOutlivesADay: the go command rewrites its build cache's
// trim record a day after it was written, and the image's cache is
// read-only: that record must be the job's to write (go.Dockerfile), or a
// day after the image was built every Go job fails to compile ("failed to
// trim cache"). The job sets the record two days back, as a day-old image
// would have it, and both a plain `go build` (which then trims) and the
// compile step of a Go job build.
func TestGoBuildCacheOutlivesADay(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, "docker")
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, MinIdle: -1, MaxTotal: 1, ReconcileInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close(context.Background()) })
	lim := testLimits(jobs.Limits{})
	lang, ok := langs.Lookup("go")
	require.True(t, ok)
	step := func(name string, argv ...string) agent.Step {
		return agent.Step{Name: name, Argv: argv, Timeout: lim.Timeout, OutputLimit: 1 << 20, Rlimits: lim.Rlimits, StopOnFailure: true}
	}
	old := "r=$(readlink -f \"$GOCACHE/trim.txt\") && echo $(( $(date +%s) - 2 * 86400 )) >\"$r\""
	res, err := pool.RunOnce(context.Background(), sandbox.Spec{Image: lang.Image(""), Limits: lim.Container}, &agent.RunRequest{
		Files: []agent.File{{Path: "main.go", Data: []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"built\") }\n")}},
		Steps: []agent.Step{
			step("age the trim record", "/bin/sh", "-c", "cp /usr/lib/sandq/go/template/go.mod /usr/lib/sandq/go/template/go.sum . && "+old),
			step("go build", "go", "build", "-o", "main", "."),
			step("age it again", "/bin/sh", "-c", old),
			step("compile", lang.Compile...),
			step("run", lang.Run...),
		},
	})
	require.NoError(t, err)
	for _, st := range res.Steps {
		require.True(t, st.OK(), "%s: exit %d, stderr: %s", st.Name, st.ExitCode, stderr(st))
	}
	require.Len(t, res.Steps, 5)
	require.Equal(t, "built\n", stdout(res.Last()))
}
