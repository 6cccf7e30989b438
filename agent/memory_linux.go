//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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
// runs, a watchdog reads /proc/meminfo every gvisorPollInterval and, when
// the sandbox's usage passes the limit, kills every process but the agent,
// as the kernel's OOM killer would, and counts the kill. readOOMKills of
// gvisorOOMPath returns that count, so a step reports OOMKilled exactly as
// under runc. The host cgroup stays the backstop: a job that outruns the
// watchdog still takes the sandbox down and the worker sees the agent gone
// (measured: 0 of ~100 memory bombs alone or beside CPU and I/O hogs, but 2
// of ~20 runs of TestOOMKilled beside the rest of the suite on 2 cores; the
// engine then reports the container OOM-killed).
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

// gvisorOOMPath is the oomPath of an agent that counts its own watchdog's
// kills; it names no file.
const gvisorOOMPath = "gvisor:meminfo"

// gvisorPollInterval is how often the watchdog reads /proc/meminfo while a
// step runs. Each reading costs about 60 µs of sentry time under the
// ptrace platform (a syscall there costs about 30 µs), so this is about 3%
// of a core, and only while a step runs.
const gvisorPollInterval = 2 * time.Millisecond

// isGVisor reports whether the agent runs in a gVisor sandbox: only
// gVisor's /proc has sentry-meminfo (the sentry's Go runtime statistics).
func isGVisor() bool {
	_, err := os.Stat("/proc/sentry-meminfo")
	return err == nil
}

// gvisorWatchdog is the agent's watchdog, set by findGVisorOOM. The agent
// is PID 1 of its container, so there is one.
var gvisorWatchdog *memWatchdog

// findGVisorOOM is findOOMCounter's fallback: under gVisor, with a readable
// /proc/meminfo, it makes the watchdog and returns gvisorOOMPath.
func findGVisorOOM() string {
	if !isGVisor() {
		return ""
	}
	w, err := newMemWatchdog("/proc/meminfo", GVisorMemoryReserve)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent: gVisor memory watchdog: %v\n", err)
		return ""
	}
	gvisorWatchdog = w
	return gvisorOOMPath
}

// readGVisorOOMKills is readOOMKills of gvisorOOMPath.
func readGVisorOOMKills() (int64, error) {
	if gvisorWatchdog == nil {
		return 0, errors.New("no gVisor memory watchdog")
	}
	return gvisorWatchdog.kills.Load(), nil
}

// oomSource names where the kills counted at oomPath come from, for Ready.
func oomSource(oomPath string) string {
	switch oomPath {
	case "":
		return ""
	case gvisorOOMPath:
		return OOMSourceGVisorWatchdog
	}
	return filepath.Base(oomPath) // memory.events or memory.oom_control
}

// memoryLimit is the limit the agent enforces itself, for Ready: 0 when
// the kernel enforces the container's.
func memoryLimit(oomPath string) int64 {
	if oomPath != gvisorOOMPath || gvisorWatchdog == nil {
		return 0
	}
	return gvisorWatchdog.limit
}

// watchMemory starts the memory watchdog for one step when oomPath is the
// watchdog's, and returns the function that stops it; stop returns once
// the watchdog can no longer kill, so a kill it made is counted by then.
func watchMemory(oomPath string) (stop func()) {
	if oomPath != gvisorOOMPath || gvisorWatchdog == nil {
		return func() {}
	}
	return gvisorWatchdog.start(gvisorPollInterval)
}

// memWatchdog kills every process but the agent when the memory in use,
// read from a meminfo file, exceeds limit.
type memWatchdog struct {
	f     *os.File // the meminfo file, kept open: one pread per reading
	buf   []byte
	total int64 // MemTotal when made
	limit int64
	kills atomic.Int64
	// killAll signals every process but the agent: kill(-1, SIGKILL),
	// which from PID 1 reaches its whole PID namespace (gVisor's too).
	killAll func() error
}

func newMemWatchdog(path string, reserve int64) (*memWatchdog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	w := &memWatchdog{f: f, buf: make([]byte, 8192),
		killAll: func() error { return syscall.Kill(-1, syscall.SIGKILL) }}
	m, err := w.read()
	if err != nil {
		f.Close()
		return nil, err
	}
	w.total = m.total
	w.limit = memLimit(m.total, reserve)
	return w, nil
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

func (w *memWatchdog) read() (meminfo, error) {
	n, err := w.f.ReadAt(w.buf, 0)
	if err != nil && n == 0 {
		return meminfo{}, err
	}
	return parseMeminfo(w.buf[:n])
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
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return meminfo{}, fmt.Errorf("meminfo: %s has no value", key)
		}
		v, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("meminfo: %s: %w", key, err)
		}
		if len(f) > 1 && string(f[1]) == "kB" {
			v <<= 10
		}
		*dst = v
	}
	if seen != 3 || m.total <= 0 {
		return meminfo{}, errors.New("meminfo: no MemTotal or MemFree")
	}
	return m, nil
}

// start polls every interval until the returned stop is called.
func (w *memWatchdog) start(interval time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if m, err := w.read(); err == nil && m.used() > w.limit {
					w.kill()
				}
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

// kill sends SIGKILL to every process but the agent (PID 1) and counts it
// when there was one. The count is made before stop returns, so the step's
// reading after its end sees it.
func (w *memWatchdog) kill() {
	if err := w.killAll(); err == nil {
		w.kills.Add(1)
	}
}
