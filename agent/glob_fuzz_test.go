package agent

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sandq/sandq/jobs"
)

// FuzzMatchGlob: the output-file glob matcher, whose patterns come from
// jobs.
//   - MatchGlob agrees with a plain backtracking definition: path.Match per
//     segment, a "**" segment matching zero or more segments. (path.Match
//     on the whole name is not the definition: it lets "[/]" or "\\/" match
//     a "/"; testdata's f11a9b52ef4f6ce1 and a6f04a5777119bc7.)
//   - A "*" never crosses a "/": a pattern with no "**" segment matches
//     only names of as many segments.
//   - The collector's pruning is sound: for a name that matches, every
//     directory above it is one couldMatchBelow says a match may lie
//     under.
//   - jobs.ValidGlob accepts only relative patterns without "", "." or ".."
//     segments whose every segment is a valid path.Match pattern.
func FuzzMatchGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"*.png", "a.png"}, {"*.png", "d/a.png"}, {"**/*.png", "d/e/a.png"}, {"out/**", "out/a/b"},
		{"[a-", "a"}, {"\\", "x"}, {"**/**/**/**/**/**/a", strings.Repeat("x/", 50) + "a"}, {"a/*/c", "a/b/c"},
		{"*", "a/b"}, {"a*b", "a/b"}, {"a**b", "a/x/b"}, {"[/]", "/"}, {"../*", "../x"}, {"/*", "/etc"},
		{"**", ""}, {"a/**/b/**/c", "a/b/c"}, {"*\x00", "a\x00"}, {"\xff*", "\xff\xfe"}, {"[^/]", "/"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		pat, segs := strings.Split(pattern, "/"), strings.Split(name, "/")
		got := MatchGlob(pattern, name)
		if want := globOracle(pat, segs); got != want {
			t.Fatalf("MatchGlob(%q, %q) = %v; path.Match per segment with ** says %v", pattern, name, got, want)
		}
		if !slices.Contains(pat, "**") && got && len(pat) != len(segs) {
			t.Fatalf("MatchGlob(%q, %q): a * crossed a /", pattern, name)
		}
		if pattern == "**" && !got {
			t.Fatalf("** does not match %q", name)
		}
		if got && cleanName(segs) {
			for i := 1; i < len(segs); i++ {
				if dir := strings.Join(segs[:i], "/"); !couldMatchBelow(pattern, dir) {
					t.Fatalf("%q matches %q, but couldMatchBelow(%q, %q) prunes its directory", pattern, name, pattern, dir)
				}
			}
		}
		if jobs.ValidGlob(pattern) == nil {
			if strings.HasPrefix(pattern, "/") {
				t.Fatalf("ValidGlob accepted absolute %q", pattern)
			}
			for _, seg := range pat {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("ValidGlob accepted %q, with segment %q", pattern, seg)
				}
				if _, err := path.Match(seg, ""); err != nil {
					t.Fatalf("ValidGlob accepted %q, whose segment %q is bad: %v", pattern, seg, err)
				}
			}
		}
	})
}

// globOracle is the definition of MatchGlob, by memoized backtracking.
func globOracle(pat, segs []string) bool {
	memo := make(map[[2]int]bool)
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if i == len(pat) {
			return j == len(segs)
		}
		k := [2]int{i, j}
		if v, ok := memo[k]; ok {
			return v
		}
		var v bool
		if pat[i] == "**" {
			v = match(i+1, j) || j < len(segs) && match(i, j+1)
		} else if j < len(segs) {
			ok, err := path.Match(pat[i], segs[j])
			v = err == nil && ok && match(i+1, j+1)
		}
		memo[k] = v
		return v
	}
	return match(0, 0)
}

// cleanName reports whether segs are those of a name the collector
// produces: no empty, "." or ".." segment.
func cleanName(segs []string) bool {
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}
