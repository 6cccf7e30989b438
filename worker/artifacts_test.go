package worker

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// TestUploadDistinctKeys: whatever names an agent sends (an older one's
// U+FFFD for bytes that were not UTF-8, twice; a job file under .sandq/,
// where the worker moves output streams; a file where another needs a
// directory), no two artifacts of the Result share a key, each stored
// object holds the bytes its artifact lists, and what was left out is
// named in dropped_artifacts.
func TestUploadDistinctKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) agent.Artifact {
		p := filepath.Join(dir, strings.NewReplacer("/", "_", "\ufffd", "U").Replace(name)+"-"+content[:1])
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return agent.Artifact{Name: name, Kind: "file", Size: int64(len(content)), File: p}
	}
	stdout := bytes.Repeat([]byte("o"), 1<<20)
	b := setupHandler(t, func(c *Config) { c.MaxResultBytes = MinMaxResultBytes })
	b.sb.run = func(context.Context, sandbox.Spec, *agent.RunRequest) (agent.RunResult, error) {
		out, err := ran(step("run", func(s *agent.StepResult) { s.Stdout = agent.Output{Head: stdout, Total: int64(len(stdout))} }))(nil, sandbox.Spec{}, nil)
		out.Artifacts = []agent.Artifact{
			file("\ufffd.csv", "CCCCCCCC"), file("\ufffd.csv", "BBBBBB"),
			file(".sandq/stdout", "job's own file"),
			file("a", "A"), file("a/b", "AB"),
		}
		return out, err
	}
	tk, a := task(t, jobs.Job{Lang: "python", Code: "x", OutputFiles: []string{"**"}})
	require.NoError(t, b.h.process(context.Background(), a, tk))
	r := b.result(t, a.id)
	require.Equal(t, jobs.StatusSucceeded, r.Status)

	want := map[string][]byte{"\ufffd.csv": []byte("CCCCCCCC"), "a": []byte("A"), ".sandq/stdout": stdout}
	keys := map[string]bool{}
	for _, art := range r.Artifacts {
		require.False(t, keys[art.Key], "key %s listed twice", art.Key)
		keys[art.Key] = true
		require.Contains(t, want, art.Name)
		require.Equal(t, int64(len(want[art.Name])), art.Size, art.Name)
		rc, err := b.h.cfg.Artifacts.Get(context.Background(), art.Key)
		require.NoError(t, err)
		got, err := io.ReadAll(rc)
		rc.Close()
		require.NoError(t, err)
		require.True(t, bytes.Equal(want[art.Name], got), "%s holds what it lists", art.Name)
	}
	require.Len(t, r.Artifacts, len(want))
	require.Equal(t, ".sandq/stdout", r.StdoutArtifact)
	require.Equal(t, []string{
		"\ufffd.csv: name collides with another artifact named \ufffd.csv; not collected",
		".sandq/stdout: name is reserved for sandq's own artifacts (.sandq/); not collected",
		"a/b: name collides with another artifact named a (a file where this needs a directory); not collected",
	}, r.DroppedArtifacts)
}
