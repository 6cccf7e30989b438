package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/sandbox"
)

// artifactsOf writes files as a run's received artifacts would be.
func artifactsOf(t *testing.T, files map[string][]byte) []agent.Artifact {
	t.Helper()
	dir := t.TempDir()
	var arts []agent.Artifact
	for name, data := range files {
		p := filepath.Join(dir, filepath.Base(name))
		require.NoError(t, os.WriteFile(p, data, 0o600))
		arts = append(arts, agent.Artifact{Name: name, Kind: "file", Size: int64(len(data)), Mode: 0o755, File: p})
	}
	return arts
}

// TestCompileCacheBounds: an entry is its tenant's alone; a tenant past
// its share loses its own least recently used entries, not another's;
// past the total the least recently used of all go; an entry's files come
// back byte for byte with their modes.
func TestCompileCacheBounds(t *testing.T) {
	t.Parallel()
	c, err := NewCompileCache(t.TempDir(), 1000, 450)
	require.NoError(t, err)
	ok := agent.StepResult{Name: "compile", Started: true, Stderr: agent.Output{Head: []byte("warning: x")}}
	kb := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

	require.NoError(t, c.put("q1", "quiet", artifactsOf(t, map[string][]byte{"main": kb('q', 200)}), ok))
	files, step, hit := c.get("q1", "quiet")
	require.True(t, hit)
	require.Equal(t, []agent.File{{Path: "main", Mode: 0o755, Data: kb('q', 200)}}, files)
	require.Equal(t, "warning: x", string(step.Stderr.Head), "the compile's record comes back")
	_, _, hit = c.get("q1", "noisy")
	require.False(t, hit, "another tenant never gets an entry, whatever its key")

	// noisy's entries of 190 bytes each (180 and the record's 10): the
	// third takes it past its 450, and its own oldest goes.
	for _, k := range []string{"n1", "n2", "n3"} {
		require.NoError(t, c.put(k, "noisy", artifactsOf(t, map[string][]byte{"main": kb('n', 180)}), ok))
	}
	_, _, hit = c.get("n1", "noisy")
	require.False(t, hit, "the tenant's least recently used entry went for its share")
	_, _, hit = c.get("q1", "quiet")
	require.True(t, hit, "another tenant's older entry stays")
	_, err = os.Stat(c.path("n1", 0))
	require.ErrorIs(t, err, os.ErrNotExist, "an evicted entry's files go")

	// Past the total: 210 (q1) + 2 x 190 (noisy) + 2 x 210 (other) = 1010.
	// q1 was just used: n2 is the least recently used.
	require.NoError(t, c.put("o1", "other", artifactsOf(t, map[string][]byte{"main": kb('o', 200)}), ok))
	require.NoError(t, c.put("o2", "other", artifactsOf(t, map[string][]byte{"main": kb('o', 200)}), ok))
	_, _, hit = c.get("n2", "noisy")
	require.False(t, hit, "the least recently used of all went for the total")
	for _, k := range [][2]string{{"q1", "quiet"}, {"n3", "noisy"}, {"o1", "other"}, {"o2", "other"}} {
		_, _, hit = c.get(k[0], k[1])
		require.True(t, hit, k[0])
	}
	st := c.Stats()
	require.LessOrEqual(t, st.Bytes, int64(1000))
	require.Equal(t, 4, st.Entries)

	// An entry larger than a tenant's share is not kept; a lost file
	// makes its entry a miss, and it goes.
	require.NoError(t, c.put("big", "quiet", artifactsOf(t, map[string][]byte{"main": kb('b', 500)}), ok))
	_, _, hit = c.get("big", "quiet")
	require.False(t, hit)
	require.NoError(t, os.Remove(c.path("o1", 0)))
	_, _, hit = c.get("o1", "other")
	require.False(t, hit)
	require.Equal(t, 3, c.Stats().Entries)
}

// TestCompileKey: the key changes with the tenant, the image, any file's
// bytes, path or mode, the commands and the limits; not with the order of
// files or environment entries.
func TestCompileKey(t *testing.T) {
	t.Parallel()
	spec := sandbox.Spec{Image: "sandq/cpp:latest"}
	req := func(edit func(*agent.RunRequest)) *agent.RunRequest {
		r := &agent.RunRequest{
			Files:       []agent.File{{Path: "main.cpp", Data: []byte("int main(){}")}, {Path: "a.h", Data: []byte("#pragma once")}},
			Steps:       []agent.Step{{Name: "compile", Argv: []string{"g++", "-O2", "main.cpp"}, Env: []string{"A=1", "B=2"}}},
			MemoryLimit: 512 << 20,
		}
		if edit != nil {
			edit(r)
		}
		return r
	}
	base := compileKey("t", "sha256:1", spec, req(nil))
	require.Equal(t, base, compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) {
		r.Files[0], r.Files[1] = r.Files[1], r.Files[0]
		r.Steps[0].Env = []string{"B=2", "A=1"}
	})), "the order of files and environment entries does not matter")
	for name, other := range map[string]string{
		"tenant":  compileKey("u", "sha256:1", spec, req(nil)),
		"image":   compileKey("t", "sha256:2", spec, req(nil)),
		"ref":     compileKey("t", "sha256:1", sandbox.Spec{Image: "sandq/c:latest"}, req(nil)),
		"bytes":   compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.Files[0].Data = []byte("int main(){ }") })),
		"path":    compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.Files[1].Path = "b.h" })),
		"mode":    compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.Files[1].Mode = 0o755 })),
		"argv":    compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.Steps[0].Argv[1] = "-O0" })),
		"env":     compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.Steps[0].Env[0] = "A=2" })),
		"memory":  compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.MemoryLimit = 256 << 20 })),
		"rlimits": compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) { r.Steps[0].Rlimits.CPU = 3 })),
		// A file's bytes moved into its path: length-prefixed fields
		// keep the two apart.
		"split": compileKey("t", "sha256:1", spec, req(func(r *agent.RunRequest) {
			r.Files[1].Path, r.Files[1].Data = "a.h#pragma", []byte(" once")
		})),
	} {
		require.NotEqual(t, base, other, name)
	}
}
