//go:build linux

package agent

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// exitInfo is what wait4 reported for one process.
type exitInfo struct {
	status syscall.WaitStatus
	rusage syscall.Rusage
}

// reaper is the single place that calls wait4. As PID 1 the agent inherits
// every orphan; reaping them all in one loop means zombies never pile up and
// no other code races it for exit statuses. Processes started through spawn
// get their status delivered on a channel; the rusage of every other reaped
// process is added to orphanCPU so a step's CPU time includes the children
// it abandoned.
type reaper struct {
	mu        sync.Mutex
	waiters   map[int]chan exitInfo
	orphanCPU time.Duration
	kick      chan struct{}
}

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan exitInfo{}, kick: make(chan struct{}, 1)}
	go r.loop()
	return r
}

func (r *reaper) loop() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing to wait for until the next spawn
			<-r.kick
			continue
		}
		r.mu.Lock()
		ch, ok := r.waiters[pid]
		if ok {
			delete(r.waiters, pid)
		} else {
			r.orphanCPU += rusageCPU(&ru)
		}
		r.mu.Unlock()
		if ok {
			ch <- exitInfo{status: ws, rusage: ru}
		}
	}
}

// takeOrphanCPU returns and resets the CPU time of reaped orphans.
func (r *reaper) takeOrphanCPU() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.orphanCPU
	r.orphanCPU = 0
	return d
}

// spawn starts a process and registers for its exit under the reaper's lock,
// so the reaper cannot reap it before the waiter exists.
func (r *reaper) spawn(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan exitInfo, error) {
	ch := make(chan exitInfo, 1)
	r.mu.Lock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err == nil {
		r.waiters[pid] = ch
	}
	r.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return pid, ch, nil
}

// adopt registers for the exit of a process that became the agent's child
// by reparenting (a fork server's grandchild). It reports false if the
// process is already gone: reaped before it was adopted, as an orphan.
func (r *reaper) adopt(pid int) (<-chan exitInfo, bool) {
	ch := make(chan exitInfo, 1)
	r.mu.Lock()
	r.waiters[pid] = ch
	r.mu.Unlock()
	if err := syscall.Kill(pid, 0); err != nil {
		r.mu.Lock()
		delete(r.waiters, pid)
		r.mu.Unlock()
		return nil, false
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return ch, true
}

func rusageCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// otherPIDs lists every process in the PID namespace but the agent itself.
// Zombies count: they are gone only once reaped.
func otherPIDs() ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue // not a PID (self, sys, ...): skip without Atoi's error
		}
		pid, err := strconv.Atoi(n)
		if err != nil || pid == self {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// killAll sends SIGKILL to every process but the agent and waits until the
// reaper has collected them all, or until the deadline. From PID 1,
// kill(-1) reaches every other process in the namespace in one call; it is
// repeated because a fork bomb may create processes while it runs. The
// agent refuses to start unless it is PID 1, so this never reaches a host.
func killAll(deadline time.Duration) []int {
	end := time.Now().Add(deadline)
	wait := 100 * time.Microsecond
	for {
		_ = syscall.Kill(-1, syscall.SIGKILL)
		left, err := otherPIDs()
		if err == nil && len(left) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return left
		}
		time.Sleep(wait)
		wait = min(wait*2, 10*time.Millisecond)
	}
}
