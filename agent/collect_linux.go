//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"syscall"
	"time"
	"unsafe"
)

// Collection budgets, whatever a request asks: a job may fill its
// directories with anything (deep chains, floods of long names, sparse
// files, FIFOs, symbolic links), and the agent must stay quick, small and
// responsive. What does not fit is named in Dropped (the first
// maxDroppedNames, then a count), never an error of the run.
const (
	defaultMaxFiles   = 32
	defaultMaxBytes   = 32 << 20
	maxEntries        = 20000            // directory entries looked at, per run
	maxDepth          = 32               // directory levels below a walked root
	maxPathBytes      = 1024             // an artifact's name
	maxDroppedNames   = 20               // names in Dropped before the count
	collectTime       = 10 * time.Second // for the walks and the streaming
	collectChunkBytes = 256 << 10        // one artifact frame's data
)

// collected is a file chosen for return: opened, checked, kept open until
// it has been streamed.
type collected struct {
	Artifact
	f *os.File
}

// collector walks directories through file descriptors (openat relative to
// an open directory, never following a link, never blocking on a special
// file), within the budgets.
type collector struct {
	jobUID   int
	maxFiles int
	maxBytes int64
	used     int64
	entries  int
	deadline time.Time
	out      []collected
	names    ArtifactNames // the names of out, and of files streamed
	dropped  []string
	more     int // dropped beyond maxDroppedNames
}

func newCollector(c *Collect, jobUID int) *collector {
	col := &collector{jobUID: jobUID, maxFiles: c.MaxFiles, maxBytes: c.MaxBytes, deadline: time.Now().Add(collectTime)}
	if col.maxFiles <= 0 {
		col.maxFiles = defaultMaxFiles
	}
	if col.maxBytes <= 0 {
		col.maxBytes = defaultMaxBytes
	}
	return col
}

func (col *collector) drop(format string, args ...any) {
	if len(col.dropped) < maxDroppedNames {
		col.dropped = append(col.dropped, fmt.Sprintf(format, args...))
	} else {
		col.more++
	}
}

// droppedList is Dropped for the result: the first names and a count.
func (col *collector) droppedList() []string {
	if col.more == 0 {
		return col.dropped
	}
	return append(slices.Clone(col.dropped), fmt.Sprintf("... and %d more left out", col.more))
}

// close releases the files not streamed.
func (col *collector) close() {
	for _, c := range col.out {
		if c.f != nil {
			c.f.Close()
		}
	}
	col.out = nil
}

// openDir opens dir (absolute) or name in the directory open at dirfd, as
// a directory, without following a link or blocking, and checks it is a
// directory owned by uid (or root, for a root the agent made).
func openDir(dirfd int, name string, uid int) (int, error) {
	fd, st, err := openDirAt(dirfd, name)
	if err != nil {
		return -1, err
	}
	if int(st.Uid) != uid && st.Uid != 0 {
		syscall.Close(fd)
		return -1, fmt.Errorf("owned by uid %d, not the job's", st.Uid)
	}
	return fd, nil
}

// walk visits root (an absolute directory) depth first and offers every
// regular file that want accepts, labelled by label(relative path). enter
// says whether a subdirectory is worth entering.
func (col *collector) walk(root, kind string, label func(string) string, want, enter func(string) bool) {
	fd, err := openDir(-100 /* AT_FDCWD */, root, col.jobUID)
	if err != nil {
		if !errors.Is(err, syscall.ENOENT) {
			col.drop("%s: %v", root, err)
		}
		return
	}
	col.dir(fd, ".", 0, kind, label, want, enter)
}

// dir walks the directory open at fd (whose path relative to the walk's
// root is rel) and closes fd.
func (col *collector) dir(fd int, rel string, depth int, kind string, label func(string) string, want, enter func(string) bool) {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	for {
		if time.Now().After(col.deadline) {
			col.drop("%s: collection time of %s used up", label(rel), collectTime)
			return
		}
		names, err := f.Readdirnames(256)
		if len(names) == 0 || (err != nil && !errors.Is(err, io.EOF)) {
			if err != nil && !errors.Is(err, io.EOF) {
				col.drop("%s: %v", label(rel), err)
			}
			return
		}
		slices.Sort(names)
		for _, name := range names {
			if col.entries++; col.entries > maxEntries {
				if col.entries == maxEntries+1 {
					col.drop("%s: over %d directory entries; the rest were not looked at", label(rel), maxEntries)
				}
				return
			}
			p := name
			if rel != "." {
				p = rel + "/" + name
			}
			if len(p) > maxPathBytes {
				col.drop("%s...: path over %d bytes", label(p[:64]), maxPathBytes)
				continue
			}
			var st syscall.Stat_t
			if err := fstatat(fd, name, &st); err != nil {
				continue // gone meanwhile
			}
			switch st.Mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				if !enter(p) {
					continue
				}
				if depth+1 > maxDepth {
					col.drop("%s: deeper than %d levels; not entered", label(p), maxDepth)
					continue
				}
				sub, err := openDir(fd, name, col.jobUID)
				if err != nil {
					col.drop("%s: %v", label(p), err)
					continue
				}
				col.dir(sub, p, depth+1, kind, label, want, enter)
			case syscall.S_IFREG:
				if want(p) {
					col.file(fd, name, label(p), kind, &st)
				}
			default:
				if want(p) {
					col.drop("%s: not a regular file (links are never followed)", ShowName(label(p)))
				}
			}
		}
	}
}

// file takes the regular file name in the directory open at dirfd, if its
// label can be an artifact's name (ArtifactNames.Check: each artifact its
// own name, never one under ReservedDir) and it fits the caps. st is its
// lstat.
func (col *collector) file(dirfd int, name, label, kind string, st *syscall.Stat_t) {
	if err := col.names.Check(label); err != nil {
		col.drop("%s: %v; not collected", ShowName(label), err)
		return
	}
	switch {
	case len(col.out) >= col.maxFiles:
		col.drop("%s: over the cap of %d files", label, col.maxFiles)
		return
	case st.Nlink > 1:
		col.drop("%s: has %d hard links; not collected", label, st.Nlink)
		return
	case col.used+st.Size > col.maxBytes:
		col.drop("%s: %d bytes would exceed the %d-byte total cap", label, st.Size, col.maxBytes)
		return
	}
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		col.drop("%s: %v", label, err)
		return
	}
	var now syscall.Stat_t
	if err := syscall.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev ||
		now.Mode&syscall.S_IFMT != syscall.S_IFREG || now.Nlink > 1 || col.used+now.Size > col.maxBytes {
		syscall.Close(fd)
		col.drop("%s: changed while it was collected", label)
		return
	}
	if err := col.names.Claim(label); err != nil { // checked above: cannot happen
		syscall.Close(fd)
		col.drop("%s: %v; not collected", ShowName(label), err)
		return
	}
	col.used += now.Size
	col.out = append(col.out, collected{Artifact: Artifact{Name: label, Kind: kind, Size: now.Size, Mode: now.Mode & 0o777}, f: os.NewFile(uintptr(fd), label)})
}

// fstatat is lstat of name in the directory open at dirfd
// (AT_SYMLINK_NOFOLLOW); the syscall package has no wrapper.
func fstatat(dirfd int, name string, st *syscall.Stat_t) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, e := syscall.Syscall6(sysFstatat, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), 0x100, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// collect gathers the plots dir, then the work dir's files that match the
// globs, within the caps and budgets. The files stay open for streaming.
func collect(workDir string, c *Collect, jobUID int) *collector {
	col := newCollector(c, jobUID)
	if c.PlotsDir != "" {
		all := func(string) bool { return true }
		col.walk(c.PlotsDir, "plot", func(p string) string { return "plots/" + p }, all, all)
	}
	if len(c.Globs) > 0 {
		col.walk(workDir, "file", func(p string) string { return p },
			func(p string) bool {
				for _, g := range c.Globs {
					if MatchGlob(g, p) {
						return true
					}
				}
				return false
			},
			func(dir string) bool {
				for _, g := range c.Globs {
					if couldMatchBelow(g, dir) {
						return true
					}
				}
				return false
			})
	}
	return col
}

// stream sends every collected file in chunks through send, in the order
// collected, and returns the artifacts that arrived whole. A file that
// cannot be read to its size is dropped (its chunks so far are discarded
// by the receiver: the last chunk of an artifact carries Last).
func (col *collector) stream(send func(ArtifactChunk) error) ([]Artifact, error) {
	// The buffer is as large as the largest file needs, up to a chunk: most
	// jobs collect nothing, and a plot fits in one small read.
	var largest int64
	for _, c := range col.out {
		largest = max(largest, c.Size)
	}
	buf := make([]byte, max(min(largest, collectChunkBytes), 1))
	var sent []Artifact
	for i := range col.out {
		c := &col.out[i]
		ok, err := col.streamOne(len(sent), c, buf, send)
		c.f.Close()
		c.f = nil
		if err != nil {
			return sent, err
		}
		if ok {
			sent = append(sent, c.Artifact)
		}
	}
	col.out = nil
	return sent, nil
}

// streamOne sends one file as artifact number index. It returns false
// (dropped) when the file could not be read to its size or time ran out;
// an error only when send fails (the worker is gone).
func (col *collector) streamOne(index int, c *collected, buf []byte, send func(ArtifactChunk) error) (bool, error) {
	var off int64
	for {
		if time.Now().After(col.deadline) {
			col.drop("%s: collection time of %s used up", c.Name, collectTime)
			return false, send(ArtifactChunk{Index: index, Name: c.Name, Kind: c.Kind, Offset: off, Abort: true})
		}
		n, err := io.ReadFull(c.f, buf[:min(int64(len(buf)), c.Size-off)])
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			col.drop("%s: %v", c.Name, err)
			return false, send(ArtifactChunk{Index: index, Name: c.Name, Kind: c.Kind, Offset: off, Abort: true})
		}
		last := off+int64(n) >= c.Size
		if n == 0 && !last {
			col.drop("%s: shorter than its %d bytes", c.Name, c.Size)
			return false, send(ArtifactChunk{Index: index, Name: c.Name, Kind: c.Kind, Offset: off, Abort: true})
		}
		if err := send(ArtifactChunk{Index: index, Name: c.Name, Kind: c.Kind, Size: c.Size, Offset: off, Data: buf[:n], Last: last}); err != nil {
			return false, err
		}
		off += int64(n)
		if last {
			return true, nil
		}
	}
}

// makePlotsDir makes the plots directory afresh for a job: its parent is
// root's (so the job can neither replace nor rename the directory), the
// directory the job's, empty. dir is absolute, two levels below a
// directory that exists (/tmp/.sandq/plots).
func makePlotsDir(dir string, uid int) error {
	parent := path.Dir(dir)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(parent, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a root-owned directory", parent)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return os.Lchown(dir, uid, uid)
}
