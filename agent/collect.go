package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
)

// MatchGlob reports whether name (slash-separated, relative) matches
// pattern: path.Match per segment, and "**" matching zero or more segments.
func MatchGlob(pattern, name string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], name[0]); err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// ValidGlob reports whether pattern is a relative glob that MatchGlob
// accepts.
func ValidGlob(pattern string) error {
	if pattern == "" || strings.HasPrefix(pattern, "/") {
		return fmt.Errorf("glob %q must be relative to the work dir", pattern)
	}
	for _, seg := range strings.Split(pattern, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return fmt.Errorf("glob %q: segment %q not allowed", pattern, seg)
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("glob %q: %v", pattern, err)
		}
	}
	return nil
}

type collector struct {
	maxFiles int
	maxBytes int64
	used     int64
	out      []Artifact
	dropped  []string
}

// collect gathers the plots dir, then the work dir's files that match the
// globs, within the caps.
func collect(workDir string, c *Collect) ([]Artifact, []string) {
	col := &collector{maxFiles: c.MaxFiles, maxBytes: c.MaxBytes}
	if col.maxFiles <= 0 {
		col.maxFiles = 32
	}
	if col.maxBytes <= 0 {
		col.maxBytes = 32 << 20
	}
	if c.PlotsDir != "" {
		col.walk(c.PlotsDir, "plot", func(string) bool { return true })
	}
	if len(c.Globs) > 0 {
		col.walk(workDir, "file", func(name string) bool {
			for _, g := range c.Globs {
				if MatchGlob(g, name) {
					return true
				}
			}
			return false
		})
	}
	return col.out, col.dropped
}

func (col *collector) walk(dir, kind string, want func(string) bool) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			col.dropped = append(col.dropped, fmt.Sprintf("%s: %v", dir, err))
		}
		return
	}
	defer root.Close()
	var names []string
	_ = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." || d.IsDir() {
			return nil
		}
		if !want(name) {
			return nil
		}
		if !d.Type().IsRegular() {
			col.dropped = append(col.dropped, fmt.Sprintf("%s: not a regular file (links are never followed)", name))
			return nil
		}
		names = append(names, name)
		return nil
	})
	sort.Strings(names)
	for _, name := range names {
		label := name
		if kind == "plot" {
			label = "plots/" + name
		}
		col.read(root, name, label, kind)
	}
}

func (col *collector) read(root *os.Root, name, label, kind string) {
	if len(col.out) >= col.maxFiles {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: over the cap of %d files", label, col.maxFiles))
		return
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: %v", label, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: not a regular file", label))
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: has %d hard links; not collected", label, st.Nlink))
		return
	}
	if col.used+fi.Size() > col.maxBytes {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: %d bytes would exceed the %d-byte total cap", label, fi.Size(), col.maxBytes))
		return
	}
	data, err := io.ReadAll(io.LimitReader(f, col.maxBytes-col.used+1))
	if err != nil {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: %v", label, err))
		return
	}
	if int64(len(data)) > col.maxBytes-col.used {
		col.dropped = append(col.dropped, fmt.Sprintf("%s: grew past the %d-byte total cap", label, col.maxBytes))
		return
	}
	col.used += int64(len(data))
	col.out = append(col.out, Artifact{Name: label, Kind: kind, Data: data})
}
