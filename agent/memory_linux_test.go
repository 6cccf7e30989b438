//go:build linux

package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// gVisor's /proc/meminfo (runsc 20221219, --memory 512m, a JVM running).
const gvisorMeminfo = `MemTotal:         524288 kB
MemFree:          354800 kB
MemAvailable:     354800 kB
Buffers:               0 kB
Cached:           150776 kB
AnonPages:         18708 kB
Mapped:           150768 kB
Shmem:                 8 kB
`

func TestParseMeminfo(t *testing.T) {
	m, err := parseMeminfo([]byte(gvisorMeminfo))
	if err != nil {
		t.Fatal(err)
	}
	if m.total != 524288<<10 || m.free != 354800<<10 || m.mapped != 150768<<10 {
		t.Fatalf("parsed %+v", m)
	}
	if got, want := m.used(), int64(524288-354800-150768)<<10; got != want {
		t.Fatalf("used %d, want %d", got, want)
	}
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemTotal: x kB\nMemFree: 1 kB\n", "MemTotal:\nMemFree: 1 kB\n"} {
		if _, err := parseMeminfo([]byte(bad)); err == nil {
			t.Errorf("parseMeminfo(%q) succeeded", bad)
		}
	}
}

func TestMemLimit(t *testing.T) {
	if got := memLimit(1<<30, GVisorMemoryReserve); got != 1<<30-GVisorMemoryReserve {
		t.Errorf("1 GiB: %d", got)
	}
	if got := memLimit(64<<20, GVisorMemoryReserve); got != 32<<20 {
		t.Errorf("64 MiB: %d", got)
	}
}

// The watchdog kills only above the limit, counts only kills that reached
// a process, and its count is complete once stop has returned.
func TestMemWatchdog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	setFree := func(freeKB int) {
		b := fmt.Sprintf("MemTotal: 262144 kB\nMemFree: %d kB\nMapped: 100000 kB\n", freeKB)
		if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setFree(200000)
	w, err := newMemWatchdog(path, GVisorMemoryReserve)
	if err != nil {
		t.Fatal(err)
	}
	if w.limit != 256<<20-GVisorMemoryReserve {
		t.Fatalf("limit %d", w.limit)
	}
	signaled := make(chan struct{}, 100)
	reached := true
	w.killAll = func() error {
		signaled <- struct{}{}
		if !reached {
			return os.ErrNotExist // ESRCH: no process left
		}
		return nil
	}
	run := func() int64 {
		before := w.kills.Load()
		stop := w.start(pollPace{min: time.Millisecond, max: time.Millisecond, rate: 1})
		time.Sleep(30 * time.Millisecond)
		stop()
		return w.kills.Load() - before
	}

	if n := run(); n != 0 { // 62144 kB used with Mapped, none without
		t.Fatalf("%d kills below the limit", n)
	}
	setFree(0) // 262144 kB used with Mapped, 162144 kB without: below 208 MiB
	if n := run(); n != 0 {
		t.Fatalf("%d kills with only Mapped (host page cache) above the limit", n)
	}
	if err := os.WriteFile(path, []byte("MemTotal: 262144 kB\nMemFree: 1000 kB\nMapped: 0 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := run(); n == 0 {
		t.Fatal("no kill above the limit")
	}
	reached = false
	if n := run(); n != 0 {
		t.Fatalf("%d kills counted with no process to kill", n)
	}
	// Stopped, it reads no more.
	for len(signaled) > 0 {
		<-signaled
	}
	time.Sleep(10 * time.Millisecond)
	if len(signaled) != 0 {
		t.Fatal("the watchdog signaled after stop")
	}
}

func TestPollPace(t *testing.T) {
	p := pollPace{min: time.Millisecond, max: 50 * time.Millisecond, rate: 1 << 30, lag: 2 * time.Millisecond}
	for _, c := range []struct {
		room int64
		want time.Duration
	}{
		{-1, time.Millisecond},                // past the limit
		{0, time.Millisecond},                 // at it
		{1 << 20, time.Millisecond},           // 0.98 ms to reach it, less the lag
		{10 << 20, 7765625 * time.Nanosecond}, // 9.77 ms less 2
		{512 << 20, 50 * time.Millisecond},    // 500 ms: at most max
	} {
		if got := p.next(c.room); got != c.want {
			t.Errorf("next(%d) = %s, want %s", c.room, got, c.want)
		}
	}
}

// TestMemWatchdogPacesItsReadings: a job far below its limit is read as
// its step starts and then at most every max; one near it every min; and
// one growing at the pace's rate is killed soon after it passes the limit,
// not a max later.
func TestMemWatchdogPacesItsReadings(t *testing.T) {
	pace := pollPace{min: time.Millisecond, max: 100 * time.Millisecond, rate: 1 << 30}
	watch := func(limit int64, usage func(time.Duration) int64, d time.Duration) (reads int, killedAt time.Duration) {
		var n atomic.Int64
		start := time.Now()
		var kill atomic.Int64
		w := &memWatchdog{limit: limit, kills: new(atomic.Int64),
			read: func() (int64, error) { n.Add(1); return usage(time.Since(start)), nil },
			killAll: func() error {
				kill.CompareAndSwap(0, int64(time.Since(start)))
				return nil
			}}
		stop := w.start(pace)
		time.Sleep(d)
		stop()
		return int(n.Load()), time.Duration(kill.Load())
	}

	reads, killed := watch(256<<20, func(time.Duration) int64 { return 20 << 20 }, 150*time.Millisecond)
	if reads < 1 || reads > 3 || killed != 0 {
		t.Errorf("far below the limit for 150 ms: %d readings (want 1 to 3: now, then every 100 ms), killed %v", reads, killed)
	}
	reads, _ = watch(256<<20, func(time.Duration) int64 { return 256<<20 - 64<<10 }, 50*time.Millisecond)
	if reads < 10 {
		t.Errorf("64 KiB below the limit for 50 ms: %d readings, want one about every ms", reads)
	}
	// From 0 at 1 GiB/s, the limit is passed at 150 ms; at a fixed 100 ms
	// the kill would come at 200.
	limit := int64(150 << 20)
	passes := time.Duration(float64(limit) / float64(1<<30) * float64(time.Second))
	_, killed = watch(limit, func(d time.Duration) int64 { return int64(d.Seconds() * (1 << 30)) }, 300*time.Millisecond)
	if killed < passes || killed > passes+35*time.Millisecond {
		t.Errorf("growing at the pace's rate, passing the limit at %s: killed at %s", passes, killed)
	}
}

// TestSentryHeap reads HeapAlloc from gVisor's /proc/sentry-meminfo (as
// runsc prints it), in bytes.
func TestSentryHeap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sentry-meminfo")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("Alloc:              2962 kB\nTotalAlloc:        12627 kB\nSys:               17766 kB\nHeapAlloc:         41205 kB\nHeapSys:           52288 kB\n")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := &memory{sentry: f, sentryBuf: make([]byte, 4096)}
	if got, err := m.sentryHeap(); err != nil || got != 41205<<10 {
		t.Fatalf("sentryHeap = %d, %v; want %d", got, err, 41205<<10)
	}
	write("Alloc: 1 kB\n")
	if got, err := m.sentryHeap(); err == nil {
		t.Fatalf("sentryHeap without HeapAlloc = %d, want an error", got)
	}
	if _, err := (&memory{}).sentryHeap(); err == nil {
		t.Fatal("sentryHeap outside gVisor: want an error")
	}
}

// TestProcRSSCountsGrowthNotSize: a process counts by how far its resident
// set grew since it was first seen (a forked child's inherited set is its
// base, not growth); one that shrank counts less than 0; one that is gone
// or skipped, and names that are not processes, count nothing.
func TestProcRSSCountsGrowthNotSize(t *testing.T) {
	root := t.TempDir()
	page := int64(os.Getpagesize())
	set := func(pid, pages int) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "statm"), fmt.Appendf(nil, "9999 %d 0 0 0 0 0\n", pages), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(pid int) {
		if err := os.RemoveAll(filepath.Join(root, fmt.Sprint(pid))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &procRSS{root: root, skip: func(pid int) bool { return pid == 1 }}
	set(1, 5000) // the agent
	set(10, 100)
	if g := p.growth(); g != 0 {
		t.Fatalf("first reading: growth %d, want 0", g)
	}
	set(1, 9000)
	set(10, 300) // grew 200 pages
	set(11, 300) // forked from 10: its base
	if g := p.growth(); g != 200*page {
		t.Fatalf("after growth and a fork: %d pages, want 200", g/page)
	}
	set(11, 350) // the child grew 50
	set(10, 250) // the parent freed 50
	if g := p.growth(); g != 200*page {
		t.Fatalf("after the child grew and the parent shrank: %d pages, want 200", g/page)
	}
	gone(10)
	if g := p.growth(); g != 50*page {
		t.Fatalf("after the parent left: %d pages, want 50", g/page)
	}
	set(10, 1000) // a new process with the old pid: its base anew
	if g := p.growth(); g != 50*page {
		t.Fatalf("a pid used again: %d pages, want 50", g/page)
	}
}

// TestResidentSetReadsLinux: the statm of a live process reads as its
// resident set, not 0.
func TestResidentSetReadsLinux(t *testing.T) {
	r, err := residentSet(fmt.Sprintf("/proc/%d/statm", os.Getpid()))
	if err != nil || r <= 0 {
		t.Fatalf("own resident set: %d, %v", r, err)
	}
	if _, err := residentSet(filepath.Join(t.TempDir(), "statm")); err == nil {
		t.Fatal("a missing statm read without error")
	}
}

// TestProcRSSAnonGrowth: the anonymous growth counts smaps' Anonymous
// lines against each process's whole resident set when first seen, so the
// pages of files a process maps (in its resident set, not in Anonymous)
// never count, and a process gone since leaves the sum.
func TestProcRSSAnonGrowth(t *testing.T) {
	root := t.TempDir()
	page := int64(os.Getpagesize())
	write := func(pid int, name, text string) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	statm := func(pid int, bytes int64) { write(pid, "statm", fmt.Sprintf("9999 %d 0 0 0 0 0\n", bytes/page)) }
	smaps := func(pid int, anonKB ...int) {
		var b strings.Builder
		for i, kb := range anonKB {
			fmt.Fprintf(&b, "%x-%x r-xp 00000000 00:05 %d /usr/lib/libx.so\nSize: 8000 kB\nRss: 7000 kB\nAnonymous: %8d kB\nVmFlags: rd ex\n", i<<20, (i+1)<<20, i+7, kb)
		}
		write(pid, "smaps", b.String())
	}
	p := &procRSS{root: root, skip: func(pid int) bool { return pid == 1 }}
	statm(10, 20<<20) // 5 MiB anonymous, 15 of a file's
	smaps(10, 2048, 3072)
	statm(11, 20<<20)
	smaps(11, 5120)
	p.growth()
	if g := p.anonGrowth(); g != -30<<20 {
		t.Fatalf("as first seen: %d MiB, want -30 (the file pages at first sight)", g>>20)
	}
	// 10 maps 40 MiB more of a file (its resident set grows, Anonymous
	// not); 11 allocates 100 MiB.
	statm(10, 60<<20)
	statm(11, 120<<20)
	smaps(11, 5120+100<<10)
	if g := p.growth(); g != 140<<20 {
		t.Fatalf("resident growth %d MiB, want 140", g>>20)
	}
	if g := p.anonGrowth(); g != 70<<20 {
		t.Fatalf("anonymous growth %d MiB, want 70: 11's 100 less the 15 of file pages each had when first seen", g>>20)
	}
	if err := os.Remove(filepath.Join(root, "11", "smaps")); err != nil {
		t.Fatal(err)
	}
	if g := p.anonGrowth(); g != -15<<20 {
		t.Fatalf("with 11 gone: %d MiB, want -15", g>>20)
	}
	// A line longer than the reader's buffer (a path) is skipped whole,
	// even where its continuation looks like a field.
	long := "7f00-7f01 rw-p 0 00:05 3 /"
	long += strings.Repeat("x", 64<<10-len(long)) // the buffer's size: the rest reads as a line's start
	write(10, "smaps", long+"Anonymous: 999 kB\nAnonymous:       8 kB\n"+
		"7f01-7f02 rw-p 0 00:05 4 /"+strings.Repeat("y", 64<<10-len("7f01-7f02 rw-p 0 00:05 4 /")-1)+"\nAnonymous:       4 kB\n")
	if a, err := p.anonResident(filepath.Join(root, "10", "smaps")); err != nil || a != 12<<10 {
		t.Fatalf("smaps with long lines: %d, %v; want 12 KiB", a, err)
	}
	write(10, "smaps", "Anonymous: 12 MB\n")
	if _, err := p.anonResident(filepath.Join(root, "10", "smaps")); err == nil {
		t.Fatal("an Anonymous line not in kB read without error")
	}
	// Linux's own smaps reads too (the test's process has anonymous
	// memory).
	if a, err := p.anonResident(fmt.Sprintf("/proc/%d/smaps", os.Getpid())); err != nil || a <= 0 {
		t.Fatalf("own anonymous memory: %d, %v", a, err)
	}
}
