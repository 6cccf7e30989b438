package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ReservedDir is the work-dir name whose artifacts are sandq's own: the
// worker stores output streams moved out of a large result as
// ".sandq/stdout", ".sandq/compile.stderr" and so on. A job's file named
// ".sandq" or under ".sandq/" is never returned, so no job file can take
// (or block, as a file where a directory is needed) such a name.
const ReservedDir = ".sandq"

// ErrNameNotUTF8 is why a file whose path is not valid UTF-8 is left out:
// names travel as JSON, where invalid bytes become U+FFFD, so distinct
// files would share one name and one key in the artifact store.
var ErrNameNotUTF8 = errors.New("name is not valid UTF-8")

// ArtifactNames is the set of names a run's artifacts have taken. Every
// artifact of a Result must have its own name (its store key is derived
// from it alone), and no name may be a directory of another: both would
// mean two artifacts in one place of a store, the later one replacing the
// earlier or failing. The collector claims each name as it takes a file;
// the worker claims them again as it uploads, whatever sent them.
type ArtifactNames struct {
	names map[string]bool // taken names
	dirs  map[string]bool // every directory of a taken name
}

// Check reports why name cannot be an artifact's next to the names taken,
// or nil. Names come from a directory walk, so they are clean relative
// paths; Check rejects names that are not valid UTF-8, names under
// ReservedDir, and names that collide with a taken one.
func (n *ArtifactNames) Check(name string) error {
	if !utf8.ValidString(name) {
		return ErrNameNotUTF8
	}
	if name == ReservedDir || strings.HasPrefix(name, ReservedDir+"/") {
		return fmt.Errorf("name is reserved for sandq's own artifacts (%s/)", ReservedDir)
	}
	if n.names[name] {
		return fmt.Errorf("name collides with another artifact named %s", name)
	}
	if n.dirs[name] {
		return fmt.Errorf("name collides with the directory of another artifact under %s/", name)
	}
	for d := name; ; {
		i := strings.LastIndexByte(d, '/')
		if i < 0 {
			return nil
		}
		if d = d[:i]; n.names[d] {
			return fmt.Errorf("name collides with another artifact named %s (a file where this needs a directory)", d)
		}
	}
}

// Claim takes name if Check allows it.
func (n *ArtifactNames) Claim(name string) error {
	if err := n.Check(name); err != nil {
		return err
	}
	if n.names == nil {
		n.names, n.dirs = map[string]bool{}, map[string]bool{}
	}
	n.names[name] = true
	for d := name; ; {
		i := strings.LastIndexByte(d, '/')
		if i < 0 {
			break
		}
		d = d[:i]
		n.dirs[d] = true
	}
	return nil
}

// ShowName is name as a dropped-artifact line shows it: itself, or
// Go-quoted when it is not valid UTF-8, so the line names its file
// faithfully after a trip through JSON.
func ShowName(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	return strconv.Quote(name)
}
