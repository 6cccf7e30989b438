//go:build linux

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// scrub kills every process but the agent, empties every writable mount
// and removes the extended attributes a job set on them (POSIX ACLs
// included: a default ACL on /work would set the modes of the next job's
// files), restores the work dir's owner and mode, and then verifies all of
// it. Any problem is reported; the worker discards a container that is not
// clean.
func (s *Server) scrub() ScrubResult {
	start := time.Now()
	var problems []string
	if s.pre != nil && (!s.pre.ready || s.pre.forCase) {
		// Still starting: the scrub would take its placeholder script. Or
		// started on a judged job's own script: that job's, never the next's.
		s.dropPrestart()
	}
	if left := s.killOthers(); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes survive SIGKILL: %v", left))
	}
	if s.pre != nil && !s.pre.alive() {
		s.dropPrestart() // killed, by the job or with its leftovers: its socket goes too
	}
	removed := 0
	for _, dir := range s.cfg.ScrubDirs {
		n, err := emptyDir(dir)
		removed += n
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, err.Error())
		}
	}
	s.frozen = false // emptied: the next job's work dir is its own again
	if err := os.Lchown(s.cfg.WorkDir, s.cfg.JobUID, s.cfg.JobGID); err != nil {
		problems = append(problems, "chown work dir: "+err.Error())
	}
	if err := os.Chmod(s.cfg.WorkDir, 0o700); err != nil {
		problems = append(problems, "chmod work dir: "+err.Error())
	}
	problems = append(problems, s.verify()...)
	if removed > freeAfter {
		debug.FreeOSMemory()
	}
	if len(problems) == 0 {
		s.tcpOpens, _ = tcpOpens() // the clean state's count
	}
	return ScrubResult{Clean: len(problems) == 0, Problems: problems, TookNs: int64(time.Since(start))}
}

// verify checks, without changing anything, that the container holds
// nothing a previous job left: no process, empty writable mounts without
// extended attributes, the work dir's owner and mode, no SysV IPC object,
// no socket in the network namespace (a TIME_WAIT connection of one job
// would make the next one's bind fail).
func (s *Server) verify() []string {
	var problems []string
	spare := s.sparePIDs()
	if pids, err := otherPIDs(); err != nil {
		problems = append(problems, "list processes: "+err.Error())
	} else if pids = slices.DeleteFunc(pids, func(p int) bool { return slices.Contains(spare, p) }); len(pids) > 0 {
		problems = append(problems, fmt.Sprintf("processes left: %v", pids))
	}
	for _, dir := range s.cfg.ScrubDirs {
		names, err := someNames(dir, maxReportedNames+1)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
		} else if len(names) > maxReportedNames {
			problems = append(problems, fmt.Sprintf("%s not empty: %v and more", dir, names[:maxReportedNames]))
		} else if len(names) > 0 {
			problems = append(problems, fmt.Sprintf("%s not empty: %v", dir, names))
		}
		if xa, err := listXattrs(dir); err != nil {
			problems = append(problems, fmt.Sprintf("%s: list extended attributes: %v", dir, err))
		} else if len(xa) > 0 {
			problems = append(problems, fmt.Sprintf("%s has extended attributes: %v", dir, xa))
		}
	}
	if fi, err := os.Lstat(s.cfg.WorkDir); err != nil {
		problems = append(problems, "stat work dir: "+err.Error())
	} else if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != s.cfg.JobUID || fi.Mode() != fs.ModeDir|0o700 {
		problems = append(problems, fmt.Sprintf("work dir owner or mode changed: %v", fi.Mode()))
	}
	for _, kind := range []string{"shm", "sem", "msg"} {
		b, err := os.ReadFile("/proc/sysvipc/" + kind)
		if err != nil {
			// gVisor has SysV IPC but no /proc/sysvipc (sysvipc_linux.go).
			if n, ok := sysvIPCCount(kind); ok && n > 0 {
				problems = append(problems, fmt.Sprintf("SysV %s objects left", kind))
			}
			continue
		}
		if lines := strings.Count(strings.TrimSpace(string(b)), "\n"); lines > 0 {
			problems = append(problems, fmt.Sprintf("%d SysV %s objects left", lines, kind))
		}
	}
	problems = append(problems, sockets(s.spareInodes())...)
	// A closed TCP connection's TIME_WAIT state is not always listed
	// (gVisor's /proc/net/tcp omits it), yet it makes the next job's bind
	// fail: a namespace whose TCP connection count moved since it was last
	// clean is not proved clean.
	if n, ok := tcpOpens(); ok && s.tcpOpens >= 0 && n != s.tcpOpens {
		problems = append(problems, fmt.Sprintf("%d TCP connections opened in the network namespace; their state may remain", n-s.tcpOpens))
	}
	return problems
}

// tcpOpens is the network namespace's count of TCP connections ever
// opened (ActiveOpens + PassiveOpens in /proc/net/snmp).
func tcpOpens() (int64, bool) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, false
	}
	var header []string
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "Tcp:") {
			continue
		}
		f := strings.Fields(line)
		if header == nil {
			header = f
			continue
		}
		var n int64
		found := 0
		for i, name := range header {
			if (name == "ActiveOpens" || name == "PassiveOpens") && i < len(f) {
				v, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return 0, false
				}
				n += v
				found++
			}
		}
		return n, found == 2
	}
	return 0, false
}

// sockstat reads the network namespace's socket counts from a
// /proc/net/sockstat file: sockets in use per protocol, and TCP's
// TIME_WAIT. Reading /proc/net/tcp instead walks the host's whole TCP hash
// table, every bucket, on every read: ~6 ms of CPU per scrub on a host
// with many connections, most of the agent's CPU. ok is false where the
// file is missing (gVisor): the tables are read then.
func sockstat(path string) (problems []string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	return parseSockstat(b)
}

func parseSockstat(b []byte) (problems []string, ok bool) {
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		proto, rest, _ := strings.Cut(line, ":")
		if proto == "sockets" || strings.HasPrefix(proto, "FRAG") || proto == "" {
			continue
		}
		f := strings.Fields(rest)
		for i := 0; i+1 < len(f); i += 2 {
			if f[i] != "inuse" && f[i] != "tw" {
				continue
			}
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return nil, false
			}
			found = true
			if n > 0 {
				what := proto + " sockets"
				if f[i] == "tw" {
					what = proto + " connections in TIME_WAIT"
				}
				problems = append(problems, fmt.Sprintf("%d %s left in the network namespace", n, what))
			}
		}
	}
	return problems, found
}

// sockets reports the sockets left in the container's network namespace
// (only the job can have made any: the agent holds none but the fork
// server's control socket, whose two ends' inodes are in spare). A file
// that does not exist is skipped (gVisor lacks some).
func sockets(spare []uint64) []string {
	var problems []string
	tables := []string{"unix"}
	for _, s := range []struct {
		file   string
		tables []string
	}{{"sockstat", []string{"tcp", "udp", "raw"}}, {"sockstat6", []string{"tcp6", "udp6", "raw6"}}} {
		left, ok := sockstat("/proc/net/" + s.file)
		if !ok {
			tables = append(tables, s.tables...)
			continue
		}
		problems = append(problems, left...)
	}
	for _, t := range tables {
		f, err := os.Open("/proc/net/" + t)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		n := -1 // the header
		for sc.Scan() {
			line := sc.Text()
			if t == "unix" && len(spare) > 0 {
				// Num RefCount Protocol Flags Type St Inode [Path]
				if f := strings.Fields(line); len(f) >= 7 {
					if ino, err := strconv.ParseUint(f[6], 10, 64); err == nil && slices.Contains(spare, ino) {
						continue
					}
				}
			}
			if strings.TrimSpace(line) != "" {
				n++
			}
		}
		f.Close()
		if n > 0 {
			problems = append(problems, fmt.Sprintf("%d %s sockets left in the network namespace", n, t))
		}
	}
	return problems
}

// dirBatch is how many names the scrub reads of a directory at a time. A
// job can leave any number of entries in a directory (hundreds of
// thousands of long names fit a small tmpfs, or of hard links to one
// file); reading them all at once would hold them all in the agent's heap,
// which the container's memory limit charges to the next job.
const dirBatch = 1024

// maxReportedNames is how many names of a directory that is not empty
// verify reports.
const maxReportedNames = 8

// freeAfter is the number of entries past which a scrub returns the
// agent's free heap to the kernel at once (debug.FreeOSMemory, a GC
// cycle of the agent's small heap), rather than when the agent is
// next idle, which may be after the next job: the names it read were
// garbage, but the memory they took is charged to the container until it
// is given back.
const freeAfter = 4096

// someNames returns at most n names of dir's entries, sorted so that a
// report is the same for the same directory contents.
func someNames(dir string, n int) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	sort.Strings(names)
	return names, err
}

// emptyDir removes everything inside dir (not dir itself) and the
// extended attributes a job may have set on it, and returns how many
// entries it removed from dir itself. The agent holds CAP_DAC_OVERRIDE and
// CAP_FOWNER, so modes set by the job cannot stop it.
//
// Names are read and removed dirBatch at a time, as os.RemoveAll does in
// a subdirectory: after a batch is removed the directory is opened again,
// since removing entries may reorder what is left and reading on could
// skip some (Go issue 20841). After a batch with failures it is read on
// instead, so each failing entry is met once; verify reports what is left.
func emptyDir(dir string) (int, error) {
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer func() { d.Close() }() // the last one opened (nil's Close is an error, no more)
	removed, failed := 0, 0
	var errs []error
	for {
		names, rerr := d.Readdirnames(dirBatch)
		batchFailed := false
		for _, n := range names {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				batchFailed = true
				if failed++; failed <= maxReportedNames {
					errs = append(errs, err)
				}
			} else {
				removed++
			}
		}
		if errors.Is(rerr, io.EOF) || (rerr == nil && len(names) < dirBatch) {
			break
		}
		if rerr != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", dir, rerr))
			break
		}
		if !batchFailed {
			d.Close()
			if d, err = os.Open(dir); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	if failed > maxReportedNames {
		errs = append(errs, fmt.Errorf("%s: %d more entries not removed", dir, failed-maxReportedNames))
	}
	xa, err := listXattrs(dir)
	if err != nil {
		errs = append(errs, fmt.Errorf("list extended attributes of %s: %w", dir, err))
	}
	for _, a := range xa {
		if err := syscall.Removexattr(dir, a); err != nil {
			errs = append(errs, fmt.Errorf("remove xattr %s on %s: %w", a, dir, err))
		}
	}
	return removed, errors.Join(errs...)
}

// listXattrs lists the extended attributes of path that a job could have
// set: all but security.* (labels the kernel or the engine set), POSIX
// ACLs (system.posix_acl_*) included.
func listXattrs(path string) ([]string, error) {
	buf := make([]byte, 64<<10)
	n, err := syscall.Listxattr(path, buf)
	if errors.Is(err, syscall.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range strings.Split(string(buf[:n]), "\x00") {
		if a != "" && !strings.HasPrefix(a, "security.") {
			out = append(out, a)
		}
	}
	return out, nil
}
