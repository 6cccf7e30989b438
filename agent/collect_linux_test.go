//go:build linux

package agent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// receive reassembles streamed artifacts as the worker does.
func receive(t *testing.T, col *collector) (map[string][]byte, []Artifact) {
	t.Helper()
	got := map[int]*bytes.Buffer{}
	names := map[int]string{}
	arts, err := col.stream(func(ch ArtifactChunk) error {
		if ch.Abort {
			delete(got, ch.Index)
			return nil
		}
		b := got[ch.Index]
		if b == nil {
			b = &bytes.Buffer{}
			got[ch.Index] = b
		}
		require.Equal(t, int64(b.Len()), ch.Offset, "chunks in order")
		b.Write(ch.Data)
		names[ch.Index] = ch.Name
		return nil
	})
	require.NoError(t, err)
	out := map[string][]byte{}
	for i, a := range arts {
		require.Equal(t, a.Name, names[i])
		out[a.Name] = got[i].Bytes()
		require.EqualValues(t, a.Size, got[i].Len())
	}
	return out, arts
}

func TestCollectHostileTree(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	plots := t.TempDir()
	write := func(p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	write(filepath.Join(plots, "p1.png"), "png")
	require.NoError(t, syscall.Mkfifo(filepath.Join(plots, "fifo.png"), 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(plots, "link.png")))
	write(filepath.Join(work, "a.csv"), "a,b\n")
	write(filepath.Join(work, "out/deep/b.csv"), strings.Repeat("x", 600<<10)) // several chunks
	write(filepath.Join(work, "orig.txt"), "secret")
	require.NoError(t, os.Link(filepath.Join(work, "orig.txt"), filepath.Join(work, "hard.csv")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(work, "pipe.csv"), 0o644))
	f, err := os.Create(filepath.Join(work, "huge.csv"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(1<<40))
	f.Close()
	// A chain deeper than the walk goes.
	deep := work
	for i := range maxDepth + 5 {
		deep = filepath.Join(deep, fmt.Sprintf("d%d", i))
	}
	write(filepath.Join(deep, "z.csv"), "z")
	// A flood of entries, walked last (a flood walked first uses up the
	// budget for what follows: the job's own loss).
	flood := filepath.Join(work, "zflood")
	require.NoError(t, os.Mkdir(flood, 0o755))
	for i := range maxEntries + 100 {
		fh, err := os.Create(filepath.Join(flood, fmt.Sprintf("%06d.txt", i)))
		require.NoError(t, err)
		fh.Close()
	}

	col := collect(work, &Collect{Globs: []string{"**/*.csv", "zflood/*"}, PlotsDir: plots}, os.Getuid())
	files, arts := receive(t, col)
	require.Equal(t, []byte("png"), files["plots/p1.png"])
	require.Equal(t, []byte("a,b\n"), files["a.csv"])
	require.Len(t, files["out/deep/b.csv"], 600<<10)
	require.LessOrEqual(t, len(arts), defaultMaxFiles)
	dropped := col.droppedList()
	require.LessOrEqual(t, len(dropped), maxDroppedNames+1)
	all := strings.Join(dropped, "\n")
	for _, want := range []string{"plots/fifo.png: not a regular file", "plots/link.png: not a regular file",
		"hard.csv: has 2 hard links", "huge.csv: 1099511627776 bytes would exceed", "pipe.csv: not a regular file"} {
		require.Contains(t, all, want)
	}
	require.Contains(t, all, "deeper than 32 levels")
	require.Contains(t, dropped[len(dropped)-1], "more left out", "the flood's names are counted, not listed")
}

func TestMakePlotsDir(t *testing.T) {
	t.Parallel()
	require.Zero(t, os.Getuid(), "makePlotsDir chowns: the agent's tests run as root, as the agent does (make test runs as root)")
	base := t.TempDir()
	dir := filepath.Join(base, ".sandq", "plots")
	require.NoError(t, makePlotsDir(dir, 1234))
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(dir, &st))
	require.EqualValues(t, 1234, st.Uid)
	require.NoError(t, syscall.Lstat(filepath.Dir(dir), &st))
	require.EqualValues(t, 0, st.Uid, "the parent is root's")
	// A parent the job could write is refused.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o777))
	require.ErrorContains(t, makePlotsDir(dir, 1234), "not a root-owned directory")
}

func TestParseSockstat(t *testing.T) {
	clean := "sockets: used 1\nTCP: inuse 0 orphan 3 tw 0 alloc 2 mem 63\nUDP: inuse 0 mem 0\nUDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 2 memory 0\n"
	p, ok := parseSockstat([]byte(clean))
	if !ok || len(p) != 0 {
		t.Fatalf("clean namespace: %v %v", p, ok)
	}
	dirty := "sockets: used 4\nTCP: inuse 1 orphan 0 tw 2 alloc 3 mem 1\nUDP: inuse 0 mem 0\nRAW: inuse 1\n"
	p, ok = parseSockstat([]byte(dirty))
	want := []string{
		"1 TCP sockets left in the network namespace",
		"2 TCP connections in TIME_WAIT left in the network namespace",
		"1 RAW sockets left in the network namespace",
	}
	if !ok || !slices.Equal(p, want) {
		t.Fatalf("got %q %v, want %q", p, ok, want)
	}
	if _, ok := parseSockstat([]byte("nothing here\n")); ok {
		t.Fatal("a file without counts read as clean")
	}
}

// TestCollectDistinctNames: files whose names would merge on the way to
// the store (bytes that are not UTF-8, which JSON turns into U+FFFD; a
// plot's name; sandq's own .sandq/ names) are left out with the reason,
// and every artifact collected has its own name and its own bytes.
func TestCollectDistinctNames(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	plots := t.TempDir()
	write := func(p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	write(filepath.Join(plots, "p.png"), "plot")
	write(filepath.Join(work, "\xff.csv"), "AAAA")
	write(filepath.Join(work, "\xfe.csv"), "BBBBBB")
	write(filepath.Join(work, "\ufffd.csv"), "CCCCCCCC")
	write(filepath.Join(work, ".sandq/stdout"), "job's own")
	write(filepath.Join(work, "plots/p.png"), "not the plot")
	write(filepath.Join(work, "ok.txt"), "ok")

	col := collect(work, &Collect{Globs: []string{"**"}, PlotsDir: plots}, os.Getuid())
	files, arts := receive(t, col)
	require.Equal(t, map[string][]byte{
		"plots/p.png": []byte("plot"),
		"\ufffd.csv":  []byte("CCCCCCCC"),
		"ok.txt":      []byte("ok"),
	}, files)
	require.Len(t, arts, 3)
	require.ElementsMatch(t, []string{
		`"\xfe.csv": name is not valid UTF-8; not collected`,
		`"\xff.csv": name is not valid UTF-8; not collected`,
		".sandq/stdout: name is reserved for sandq's own artifacts (.sandq/); not collected",
		"plots/p.png: name collides with another artifact named plots/p.png; not collected",
	}, col.droppedList())
}
