package jobs

import (
	"fmt"
	"path"
	"strings"
)

// ValidGlob reports whether pattern is a relative glob the agent's matcher
// accepts (agent.MatchGlob: path.Match per segment, "**" for any number
// of segments): not absolute, no empty, "." or ".." segment, each
// segment valid for path.Match.
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
