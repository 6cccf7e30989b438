//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Under gVisor (runsc) there is no cgroup oom_kill counter to read, and
// there could be no use for one: gVisor mounts no cgroupfs by default,
// /proc/self/cgroup is empty, /proc/vmstat does not exist, and its
// /proc/meminfo is the sentry's own accounting. The container's memory
// cgroup limits the host processes of the whole sandbox (the sentry, the
// gofer and the ptrace stubs that hold the application's address spaces),
// so when the job reaches it the host OOM killer kills a sandbox process,
// and gVisor then kills the whole sandbox on purpose (a stub killed mid-run
// cannot be recovered; see the ptrace platform's subprocess_linux.go). The
// agent dies with the job and cannot report anything.
//
// So under gVisor the agent enforces the memory limit itself: while a step
// runs, a watchdog reads /proc/meminfo (paced by gvisorPace) and, when
// the sandbox's usage passes the limit, kills every process but the agent,
// as the kernel's OOM killer would, and counts the kill. readOOMKills of
// gvisorOOMPath returns that count, so a step reports OOMKilled exactly as
// under runc. The host cgroup stays the backstop: a job that outruns the
// watchdog still takes the sandbox down and the worker sees the agent gone
// (the engine then reports the container OOM-killed, and the job ends
// `oom`). gVisor's meminfo lags a fast allocator under load, so the
// watchdog also holds the sandbox to its limit by the processes' resident
// sets (Usage under gVisor, below): with meminfo alone 2 to 3 of 9 Ruby
// memory bombs in three loaded sandboxes outran it to the host's limit,
// 4.5 times the job's.
//
// The limit is MemTotal (gVisor reports the container's memory limit there)
// less GVisorMemoryReserve, which covers what the host charges to the
// container but the sandbox cannot see (the sentry's and the gofer's own
// memory, about 10 to 20 MiB here) plus how far a fast allocator gets
// between two readings (gVisor refreshes its usage at most every 10 ms;
// a Python bytes allocation grows about 1 GiB/s under the ptrace
// platform). Usage is MemTotal - MemFree - Mapped: the file pages gVisor
// reports as Mapped (a JVM maps its 130 MiB lib/modules) are host page
// cache, which the host reclaims before it kills.

// A watchdog does not read on a fixed tick: each reading sets the next by
// the room left. A job cannot grow faster than a rate (bytes a second), so
// the next reading comes when, growing at that rate from the last, it
// could first reach its limit; never sooner than the pace's min nor later
// than its max. Near the limit the watchdog reads every min, as it read
// always before; a job far below it, most of them, is read once as its
// step starts and then rarely. Every reading wakes the agent on the job's
// CPU: at a fixed 5 ms tick the readings added 4.5 ms to a 30 ms print(1)
// job here (sandbox's pool at c=1, p50), a 5 ms tick that read nothing
// 2.5 ms. A job that outgrows the rate is still read within max, and the
// container's own limit (the kernel's, or the host cgroup's under gVisor)
// stays the backstop either way.
type pollPace struct {
	min, max time.Duration
	rate     int64         // the fastest a job's memory grows, bytes a second
	lag      time.Duration // how old a reading may be when it is read
}

// next is the wait before the next reading, with room bytes left below
// the limit.
func (p pollPace) next(room int64) time.Duration {
	if room <= 0 {
		return p.min
	}
	d := time.Duration(float64(room)/float64(p.rate)*float64(time.Second)) - p.lag
	return min(max(d, p.min), p.max)
}

// gvisorPace paces the watchdog under gVisor. Each reading costs about 60
// µs of sentry time (a syscall there costs about 30 µs) and a few more
// syscalls per process (procRSS); the resident sets it reads are fresh,
// the lag covers a reading's own age, and a Python bytes allocation grows
// about 1 GiB/s under the ptrace platform, a Ruby one 0.7 GiB/s under
// systrap on these machines: 4 GiB/s leaves room.
var gvisorPace = pollPace{min: 2 * time.Millisecond, max: 50 * time.Millisecond, rate: 4 << 30, lag: 10 * time.Millisecond}

// cgroupPace paces the watchdog elsewhere (the cgroup's memory.stat, tens
// of µs a reading). 16 GiB/s is above what one CPU can fault in (a Python
// bytes allocation: 0.25 GiB/s on these machines; a memset of fresh pages
// a few GiB/s on bare metal): a job at 20 MiB of 256 reads again in 14 ms.
var cgroupPace = pollPace{min: 5 * time.Millisecond, max: 50 * time.Millisecond, rate: 16 << 30}

// isGVisor reports whether the agent runs in a gVisor sandbox: only
// gVisor's /proc has sentry-meminfo (the sentry's Go runtime statistics).
func isGVisor() bool {
	_, err := os.Stat("/proc/sentry-meminfo")
	return err == nil
}

// memory is how the agent keeps jobs within their memory and learns of OOM
// kills.
//
// Under runc the container's memory limit is the job's memory plus its
// tmpfs sizes plus the agent's own share (worker.LimitsOf): the agent
// kills a step whose processes' anonymous memory (the cgroup's
// memory.stat) passes the run's MemoryLimit, and counts it as an OOM kill
// beside the kernel's (the cgroup's oom_kill counter), which stays the
// backstop. Files in tmpfs are bounded by their mounts' sizes, so whatever
// the job leaves there the agent keeps its share; and the agent sets its
// own oom_score_adj to -1000 and pins every step's at 1000 (oom_linux.go),
// so the kernel never picks it.
//
// Under gVisor (above) there is no counter, and the host kills the whole
// sandbox when the container's cgroup is full: the agent watches the
// sandbox's /proc/meminfo against the container's limit less
// GVisorMemoryReserve.
type memory struct {
	source  string // Ready.OOMSource; "" when there is no OOM source
	v2      bool
	counter string       // the cgroup file with oom_kill, or ""
	stat    string       // the cgroup's memory.stat, or ""
	anonKey string       // its anonymous-memory line: "total_rss " (v1), "anon " (v2)
	gvisor  *memWatchdog // its info reads gVisor's /proc/meminfo whole
	kills   atomic.Int64 // the agent's own watchdog kills

	// sentry is gVisor's /proc/sentry-meminfo, kept open (sentryHeap).
	sentryMu  sync.Mutex
	sentry    *os.File
	sentryBuf []byte
}

// findMemory finds the cgroup files (v2, then v1), else gVisor's meminfo.
func findMemory() *memory {
	m := &memory{}
	for _, c := range []struct{ counter, stat, key string }{
		{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory.stat", "anon "},
		{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory/memory.stat", "total_rss "},
	} {
		if _, err := readStat(c.counter, "oom_kill "); err == nil {
			m.counter, m.source, m.v2 = c.counter, filepath.Base(c.counter), c.key == "anon "
			if _, err := readStat(c.stat, c.key); err == nil {
				m.stat, m.anonKey = c.stat, c.key
			}
			return m
		}
	}
	if isGVisor() {
		w, err := newMemWatchdog("/proc/meminfo", GVisorMemoryReserve)
		if err != nil {
			fmt.Fprintf(os.Stderr, "agent: gVisor memory watchdog: %v\n", err)
			return m
		}
		w.kills = &m.kills
		m.gvisor, m.source = w, OOMSourceGVisorWatchdog
		if f, err := os.Open("/proc/sentry-meminfo"); err == nil {
			m.sentry, m.sentryBuf = f, make([]byte, 4096)
		}
	}
	return m
}

// ok reports whether OOM kills can be counted at all.
func (m *memory) ok() bool { return m.source != "" }

// sandboxLimit is Ready.MemoryLimit.
func (m *memory) sandboxLimit() int64 {
	if m.gvisor == nil {
		return 0
	}
	return m.gvisor.limit
}

// oomKills is the count of OOM kills so far: the kernel's and the agent's.
func (m *memory) oomKills() int64 {
	n := m.kills.Load()
	if m.counter != "" {
		if c, err := readStat(m.counter, "oom_kill "); err == nil {
			n += c
		}
	}
	return n
}

// watch starts the watchdog for one step whose processes may use limit
// bytes (0: no limit of the agent's own), and returns the function that
// stops it; stop returns once the watchdog can no longer kill, so a kill it
// made is counted by then.
//
// A job's memory is its processes' and the kernel's that the job made
// and cannot reclaim while the files stay (see Kernel memory, below).
func (m *memory) watch(limit int64) (stop func()) {
	switch {
	case m.gvisor != nil:
		return m.watchGVisor(limit)
	case m.stat != "" && limit > 0:
		w := &memWatchdog{limit: limit, kills: &m.kills, killAll: killAllSignal,
			read: func() (int64, error) {
				anon, err := readStat(m.stat, m.anonKey)
				if err != nil {
					return 0, err
				}
				_, inodes := tmpfsUse()
				return anon + inodes*TmpfsInodeCost, nil
			}}
		return w.start(cgroupPace)
	}
	return func() {}
}

// watchGVisor is watch under gVisor. The sandbox's usage holds its tmpfs
// files too: the job's own memory is the rest. It kills at the job's limit
// (when it has one) or at the sandbox's, whichever comes first (the excess
// is the watched value, the limit 0).
//
// gVisor's /proc/meminfo lags a fast allocator (see Usage under gVisor,
// below), so the usage held to the sandbox's limit is the larger of
// meminfo's and an estimate that does not lag: the usage as the step
// started, plus the growth of the tmpfs files since then, plus the growth of every process's resident
// set since the watchdog first saw it (procRSS), less the growth of
// meminfo's Mapped (files of the host's a process maps, which a resident
// set counts and the usage leaves out: host page cache).
//
// The first reading, as the step starts, takes the bases. A job with a
// limit is charged the growth of the sentry heap too (Kernel memory,
// below; each reading of it stops the sentry's world a moment: one, not
// two, on every step's path).
func (m *memory) watchGVisor(limit int64) (stop func()) {
	first, heap, used0, files0, mapped0 := true, int64(-1), int64(0), int64(0), int64(0)
	rss := &procRSS{root: "/proc", skip: func(pid int) bool { return pid == os.Getpid() }}
	w := &memWatchdog{kills: &m.kills, killAll: killAllSignal, read: func() (int64, error) {
		mi, err := m.gvisor.info()
		if err != nil {
			return 0, err
		}
		used, mapped := mi.used(), mi.mapped
		files, _ := tmpfsUse()
		grown := rss.growth()
		var kernel int64
		if limit > 0 {
			if h, err := m.sentryHeap(); err == nil {
				if heap < 0 {
					heap = h
				}
				kernel = max(h-heap, 0)
			}
		}
		if first {
			first, used0, files0, mapped0 = false, used, files, mapped
		}
		// A resident set also counts the pages of files a process maps,
		// and Mapped does not say which are new (a rustc compile grew
		// its resident sets by 170 MiB, meminfo's usage by 4): the
		// whole sets hold the sandbox's limit, their anonymous part the
		// job's.
		est := max(used, used0+files-files0+grown-max(mapped-mapped0, 0))
		excess := est + kernel - m.gvisor.limit
		if limit > 0 {
			// The job's own memory is meminfo's, or earlier its
			// processes' anonymous growth (no file's pages), read
			// only once their whole growth could pass the limit: a
			// reading of smaps costs about 7 of statm.
			job, base := used-files, used0-files0
			if base+grown+kernel > limit {
				job = max(job, base+rss.anonGrowth())
			}
			excess = max(excess, job+kernel-limit)
		}
		return excess, nil
	}}
	return w.start(gvisorPace)
}

// Usage under gVisor. gVisor counts the memory of the sandbox's own memory
// file in /proc/meminfo only as it learns which of its pages are committed,
// at most every few tens of ms, and later under load: with three sandboxes
// and three CPU hogs on 2 cores, a Ruby growing at about 350 MiB/s had a
// resident set of 146 MiB while meminfo still showed 16, and meminfo
// stayed below a 128 MiB limit until the host's cgroup (592 MiB) killed 2
// of 9 sandboxes. A process's resident set (/proc/<pid>/statm) is gVisor's
// own count of the pages mapped into it, kept at every fault: fresh. It
// also counts the pages of the files a process maps, which the sandbox's
// usage leaves out (host page cache), so the estimate made from it holds
// the sandbox to its own limit, the one whose passing loses the sandbox,
// and not the job to its smaller one (a compile would be killed for its
// compiler's libraries). Summed over processes it counts shared pages more
// than once, and the sandbox's usage does not; so the watchdog counts each
// process's growth since it first saw it, never its size. A forked child
// starts with its parent's resident set (gVisor copies it with the mappings), which is then its
// base, not growth; what a child touches of its parent's pages it does not
// add either (measured: 111 then 112 MiB after reading 100 MiB of them).
// Growth a process made before the watchdog first saw it is missed, at
// most a reading's worth, and meminfo catches up with it.
//
// The job's own limit is held by the anonymous part of the resident sets
// (smaps' Anonymous: private pages no file backs, which gVisor counts
// apart from a file's pages as Linux does; measured: touching a 7.5 MiB
// private file mapping left it unchanged, 50 MiB of bytearray grew it by
// 50). Each process's anonymous memory now less its whole resident set
// when first seen is never more than its anonymous growth, so the
// estimate never kills a job that meminfo would not; it misses at most
// the file pages its processes held when first seen (a Python's about
// 9 MiB). Shared memory (a MAP_SHARED anonymous mapping, a memfd) is not
// in Anonymous and is left to meminfo: counting it by process would count
// the pages a parent and its child share twice. smaps costs about 0.8 ms
// a process under gVisor (statm 0.12), so it is read only when the whole
// resident sets' growth could pass the job's limit: never for most jobs.

// procRSS measures the growth of the processes' resident sets.
type procRSS struct {
	root string
	skip func(pid int) bool // the agent itself
	base map[int]int64      // pid: its resident set when first seen, bytes
	rd   *bufio.Reader      // anonResident's, reused
}

// growth is the sum over the live processes of their resident set less
// the one they had when first seen (a process that freed memory counts
// less than 0: its memory is free). A process that is gone leaves the sum.
func (p *procRSS) growth() int64 {
	d, err := os.Open(p.root)
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	seen := make(map[int]int64, len(names))
	var sum int64
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || p.skip(pid) {
			continue
		}
		r, err := residentSet(filepath.Join(p.root, name, "statm"))
		if err != nil {
			continue // gone since the listing
		}
		b, ok := p.base[pid]
		if !ok {
			b = r
		}
		seen[pid] = b
		sum += r - b
	}
	p.base = seen
	return sum
}

// anonGrowth is the sum over the processes of the last growth reading
// of their anonymous resident memory now less their resident set when
// first seen (see Usage under gVisor). A process gone since leaves the
// sum.
func (p *procRSS) anonGrowth() int64 {
	var sum int64
	for pid, b := range p.base {
		a, err := p.anonResident(filepath.Join(p.root, strconv.Itoa(pid), "smaps"))
		if err != nil {
			continue
		}
		sum += a - b
	}
	return sum
}

// anonResident reads the anonymous resident memory of a process, in
// bytes: the sum of its smaps' Anonymous lines. It reads through one
// reused 64 KiB buffer: a job that maps tens of thousands of regions makes
// a reading slow (the watchdog's CPU floor spaces the next), not the
// agent's memory grow.
func (p *procRSS) anonResident(smaps string) (int64, error) {
	f, err := os.Open(smaps)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if p.rd == nil {
		p.rd = bufio.NewReaderSize(f, 64<<10)
	} else {
		p.rd.Reset(f)
	}
	defer p.rd.Reset(nil)
	var sum int64
	long := false // within a line longer than the buffer (a path)
	for {
		line, err := p.rd.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return sum, nil
			}
			return 0, err
		}
		wasLong := long
		long = errors.Is(err, bufio.ErrBufferFull)
		if wasLong {
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("Anonymous:"))
		if !ok {
			continue
		}
		n, err := meminfoValue("Anonymous", v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", smaps, err)
		}
		sum += n
	}
}

// residentSet reads the resident set of a process, in bytes, from its
// statm (sizes in pages: total, resident, ...).
func residentSet(statm string) (int64, error) {
	b, err := os.ReadFile(statm)
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("%s: %q", statm, b)
	}
	n, err := strconv.ParseInt(string(f[1]), 10, 64)
	return n * int64(os.Getpagesize()), err
}

// Kernel memory. Besides its processes' memory a job can make the kernel
// hold memory it does not reclaim: the names and inodes of files in tmpfs
// (the size of a mount bounds their data, not them: a million hard links to
// one empty file held about 700 MB of the kernel's, and the job succeeded
// with memory_mb 256). The watchdog counts them against the job's memory:
//
//   - under Linux (runc, Podman) each inode in use in the tmpfs mounts
//     (statfs; a hard link counts as one there) is charged
//     TmpfsInodeCost. Linux's dentry and inode caches are not read: those
//     of the image's files a job looks up are reclaimable, and counting
//     them would kill a job that walks its image;
//   - under gVisor the sentry (its kernel) holds them in its Go heap:
//     the growth of its live heap since the step began (HeapAlloc in
//     /proc/sentry-meminfo) is charged (gVisor's statfs does not count
//     hard links).
//
// Docker also sets each tmpfs mount's inode count (sandbox's tmpfsInodes),
// so there a job meets ENOSPC first; Podman 4.3 refuses the option and
// gVisor ignores it, and the charge is what bounds them there.

// TmpfsInodeCost is what the watchdog charges a job for each inode in use
// in its tmpfs mounts under Linux: more than an inode and a dentry with a
// long name take (about 700 bytes measured for a hard link with a 240-byte
// name).
const TmpfsInodeCost = 1 << 10

// sentryHeap is the live heap of gVisor's sentry, in bytes.
func (m *memory) sentryHeap() (int64, error) {
	if m.sentry == nil {
		return 0, errors.New("no sentry-meminfo")
	}
	m.sentryMu.Lock()
	defer m.sentryMu.Unlock()
	n, err := m.sentry.ReadAt(m.sentryBuf, 0)
	if err != nil && n == 0 {
		return 0, err
	}
	for line := range bytes.Lines(m.sentryBuf[:n]) {
		if v, ok := bytes.CutPrefix(line, []byte("HeapAlloc:")); ok {
			return meminfoValue("HeapAlloc", v)
		}
	}
	return 0, errors.New("sentry-meminfo: no HeapAlloc")
}

func killAllSignal() error { return syscall.Kill(-1, syscall.SIGKILL) }

// tmpfsMounts are the container's tmpfs mounts, whose files are memory.
var tmpfsMounts = []string{"/work", "/tmp", "/dev/shm"}

// tmpfsUse is the bytes and the inodes in use in the tmpfs mounts.
func tmpfsUse() (size, inodes int64) {
	for _, p := range tmpfsMounts {
		var st syscall.Statfs_t
		if syscall.Statfs(p, &st) == nil {
			size += int64(st.Blocks-st.Bfree) * int64(st.Bsize)
			inodes += int64(st.Files - st.Ffree)
		}
	}
	return size, inodes
}

// readStat reads the value of the line starting with key in a cgroup file
// of "key value" lines (memory.stat, memory.events, memory.oom_control).
func readStat(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q line", path, key)
}

// memWatchdog kills every process but the agent when the memory read
// passes limit, and counts the kills.
type memWatchdog struct {
	read  func() (int64, error)   // the memory in use
	info  func() (meminfo, error) // the meminfo read is made of (newMemWatchdog's)
	limit int64
	kills *atomic.Int64
	// killAll signals every process but the agent: kill(-1, SIGKILL),
	// which from PID 1 reaches its whole PID namespace (gVisor's too).
	killAll func() error
}

// newMemWatchdog watches a meminfo file (gVisor's): usage is MemTotal -
// MemFree - Mapped, the limit MemTotal less reserve.
func newMemWatchdog(path string, reserve int64) (*memWatchdog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 8192)
	m, err := readMeminfo(f, buf)
	if err != nil {
		f.Close()
		return nil, err
	}
	info := func() (meminfo, error) { return readMeminfo(f, buf) }
	return &memWatchdog{
		limit: memLimit(m.total, reserve), kills: new(atomic.Int64), killAll: killAllSignal,
		info: info,
		read: func() (int64, error) {
			m, err := info()
			return m.used(), err
		},
	}, nil
}

// start reads now, then paced by p (pollPace), until the returned stop is
// called.
func (w *memWatchdog) start(p pollPace) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	first := w.check(p)
	go func() {
		defer close(done)
		runtime.LockOSThread() // threadCPU is this goroutine's
		defer runtime.UnlockOSThread()
		t := time.NewTimer(first)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				t.Reset(w.check(p))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}

// check reads the memory, kills past the limit, and returns the wait
// before the next reading.
//
// The wait is at least readShare times the CPU the reading took, so the
// watchdog never takes more than a share of the job's CPU however dear its
// readings get (under gVisor one costs a few syscalls per process). CPU
// time, not wall: on a loaded machine a reading's wall time is mostly
// waiting for a CPU, and a floor from it put the readings 100 ms apart
// while a job grew past its limit.
func (w *memWatchdog) check(p pollPace) time.Duration {
	start := threadCPU()
	used, err := w.read()
	floor := readShare * max(threadCPU()-start, 0)
	if err != nil {
		return max(p.min, floor)
	}
	if used > w.limit {
		w.kill()
		return max(p.min, floor)
	}
	return max(p.next(w.limit-used), floor)
}

// readShare bounds the watchdog's readings to a fifth of a CPU.
const readShare = 4

// threadCPU is the CPU time of the calling thread (the watchdog's
// goroutine keeps its thread: start), 0 if it cannot be read.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// kill sends SIGKILL to every process but the agent (PID 1) and counts it
// when there was one. The count is made before stop returns, so the step's
// reading after its end sees it.
func (w *memWatchdog) kill() {
	if err := w.killAll(); err == nil {
		w.kills.Add(1)
	}
}

// memLimit is what a job may use of total: total less reserve, but at
// least half of it (a container given no room for the reserve still runs
// its jobs, with a lower limit than asked).
func memLimit(total, reserve int64) int64 {
	return max(total-reserve, total/2)
}

type meminfo struct{ total, free, mapped int64 }

// used is the memory the sandbox holds that the host cannot reclaim.
func (m meminfo) used() int64 { return m.total - m.free - m.mapped }

// readMeminfo reads a meminfo file, kept open, into buf.
func readMeminfo(f *os.File, buf []byte) (meminfo, error) {
	n, err := f.ReadAt(buf, 0)
	if err != nil && n == 0 {
		return meminfo{}, err
	}
	return parseMeminfo(buf[:n])
}

// meminfoValue reads the value of a meminfo line after its colon
// ("  123 kB"), in bytes when it has the unit kB.
func meminfoValue(key string, rest []byte) (int64, error) {
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return 0, fmt.Errorf("meminfo: %s has no value", key)
	}
	v, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("meminfo: %s: %w", key, err)
	}
	switch {
	case len(f) == 1:
	case len(f) == 2 && string(f[1]) == "kB":
		v <<= 10
	default:
		return 0, fmt.Errorf("meminfo: %s: %q is not bytes nor kB", key, bytes.TrimSpace(rest))
	}
	return v, nil
}

// parseMeminfo reads MemTotal, MemFree and Mapped (in bytes) from the text
// of /proc/meminfo; Mapped may be missing.
func parseMeminfo(b []byte) (meminfo, error) {
	var m meminfo
	var seen int
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(key) {
		case "MemTotal":
			dst, seen = &m.total, seen|1
		case "MemFree":
			dst, seen = &m.free, seen|2
		case "Mapped":
			dst = &m.mapped
		default:
			continue
		}
		v, err := meminfoValue(string(key), rest)
		if err != nil {
			return meminfo{}, err
		}
		*dst = v
	}
	if seen != 3 || m.total <= 0 {
		return meminfo{}, errors.New("meminfo: no MemTotal or MemFree")
	}
	return m, nil
}
