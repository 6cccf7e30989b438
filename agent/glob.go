package agent

import (
	"path"
	"strings"
)

// MatchGlob reports whether name (slash-separated, relative) matches
// pattern: path.Match per segment, and "**" matching zero or more segments.
// It takes time linear in the product of the segment counts, whatever the
// pattern (no backtracking over "**").
func MatchGlob(pattern, name string) bool {
	pat, segs := strings.Split(pattern, "/"), strings.Split(name, "/")
	// cur[j]: pat[:i] matches segs[:j].
	cur := make([]bool, len(segs)+1)
	next := make([]bool, len(segs)+1)
	cur[0] = true
	for _, p := range pat {
		clear(next)
		if p == "**" {
			seen := false
			for j := range cur {
				seen = seen || cur[j]
				next[j] = seen
			}
		} else {
			for j := 0; j < len(segs); j++ {
				if cur[j] {
					if ok, err := path.Match(p, segs[j]); err == nil && ok {
						next[j+1] = true
					}
				}
			}
		}
		cur, next = next, cur
	}
	return cur[len(segs)]
}

// couldMatchBelow reports whether some name under directory dir (relative,
// "." for the root) could match pattern, so a walk need not enter
// directories no pattern reaches.
func couldMatchBelow(pattern, dir string) bool {
	if dir == "." {
		return true
	}
	pat, segs := strings.Split(pattern, "/"), strings.Split(dir, "/")
	// Like MatchGlob, but any state reached after the directory's
	// segments with pattern left means a match below is possible.
	cur := make([]bool, len(segs)+1)
	next := make([]bool, len(segs)+1)
	cur[0] = true
	for _, p := range pat {
		if cur[len(segs)] {
			return true // the directory is consumed and pattern segments remain
		}
		clear(next)
		if p == "**" {
			return true // "**" reaches anything below what matched so far
		}
		for j := 0; j < len(segs); j++ {
			if cur[j] {
				if ok, err := path.Match(p, segs[j]); err == nil && ok {
					next[j+1] = true
				}
			}
		}
		cur, next = next, cur
	}
	return false
}
