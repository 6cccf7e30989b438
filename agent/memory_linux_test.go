//go:build linux

package agent

import (
	"fmt"
	"os"
	"path/filepath"
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
		stop := w.start(time.Millisecond)
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
