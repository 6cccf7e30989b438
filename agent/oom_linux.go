//go:build linux

package agent

import (
	"os"
	"strconv"
	"strings"
)

// OOM priority. The agent holds CAP_SYS_RESOURCE for this alone: it sets
// its own oom_score_adj to -1000 (the kernel's OOM killer never takes it)
// and writes 1000 into every step process's. A write by a process with
// CAP_SYS_RESOURCE also sets the floor below which the target may not go
// (oom_score_adj_min), so a job cannot write 0 back, or anything lower,
// and every process it forks inherits the floor.

// protectSelf makes the agent the OOM killer's last choice, and reports
// whether it could (it needs CAP_SYS_RESOURCE).
func protectSelf() bool {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	return err == nil && strings.TrimSpace(string(b)) == "-1000"
}

// pinOOM pins pid at oom_score_adj 1000, floor included, then every other
// process of the container the same: a process the step forked before its
// own pin inherited the agent's -1000 and is found by the scan. Rounds
// repeat until a scan finds no process it has not pinned (a few at most: a
// process forked by a pinned parent is born pinned). A value of 1000 is no
// proof of a pin (an unprivileged write sets no floor), so every process
// is written once.
func pinOOM(pid int) {
	pin := func(p int) {
		_ = os.WriteFile("/proc/"+strconv.Itoa(p)+"/oom_score_adj", []byte("1000"), 0)
	}
	pin(pid)
	done := map[int]bool{pid: true}
	for range 8 {
		pids, err := otherPIDs()
		if err != nil {
			return
		}
		fresh := false
		for _, p := range pids {
			if !done[p] {
				pin(p)
				done[p], fresh = true, true
			}
		}
		if !fresh {
			return
		}
	}
}

// seccompMode is the calling process's seccomp mode from /proc/self/status
// (0 when the line is missing or unreadable).
func seccompMode() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
