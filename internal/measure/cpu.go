package measure

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPU is the CPU time the host's processes had used at one moment, by
// process. A process's time includes its reaped children's, so the
// short-lived processes a job forks are charged to the one that waited for
// them.
type CPU map[int]procCPU

type procCPU struct {
	comm string // what /proc/<pid>/comm says: the process's command
	ppid int
	used time.Duration
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// ReadCPU reads every process's CPU time from /proc. A process that ended
// since an earlier reading takes its time with it: read around a phase
// whose processes outlive it.
func ReadCPU() CPU {
	c := CPU{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
		l, r := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if l < 0 || r < l {
			continue
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:l])))
		f := bytes.Fields(b[r+1:])
		if err != nil || len(f) < 15 {
			continue
		}
		var ticks int64
		for _, i := range []int{11, 12, 13, 14} { // fields 14–17, counted from field 3
			v, _ := strconv.ParseInt(string(f[i]), 10, 64)
			ticks += v
		}
		comm := string(b[l+1 : r])
		if k, _, ok := strings.Cut(comm, "/"); ok && strings.HasPrefix(k, "kworker") {
			comm = "kworker" // a kernel worker's name changes with its work
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		c[pid] = procCPU{comm, ppid, time.Duration(ticks) * clockTick}
	}
	return c
}

// Sub is the CPU used between an earlier reading and c, by command (the
// name each process has at c); a process started since counts whole. A
// process that ended since (a container's agent and its shim when the
// container is replaced) brings its whole life's time to the ancestor that
// reaped it: its time at the earlier reading is taken off the nearest
// ancestor still running, so only the phase's part stays, charged to that
// ancestor's command.
func (c CPU) Sub(earlier CPU) map[string]time.Duration {
	d := map[string]time.Duration{}
	for pid, p := range c {
		d[p.comm] += p.used - earlier[pid].used
	}
	for pid, p := range earlier {
		if _, ok := c[pid]; ok {
			continue
		}
		a := p.ppid
		for i := 0; i < 64; i++ { // the chain as it was; init ends it
			if _, alive := c[a]; alive || a <= 1 {
				break
			}
			a = earlier[a].ppid
		}
		if q, ok := c[a]; ok {
			d[q.comm] -= p.used
		}
	}
	for k, v := range d {
		if v <= 0 {
			delete(d, k)
		}
	}
	return d
}

// Tally runs fn and adds the CPU each command used meanwhile to acc (as
// ReadCPU().Sub reports it): a benchmark's phase in turns sums its turns'.
func Tally(acc map[string]time.Duration, fn func()) {
	c0 := ReadCPU()
	fn()
	for k, v := range ReadCPU().Sub(c0) {
		acc[k] += v
	}
}

// CPUTable writes, for each phase, the CPU each command used a job (the
// phase's CPU over its jobs), the commands that used at least 0.1 ms a job
// in some phase, largest first.
func CPUTable(w io.Writer, title string, phases []Phase, cpu []map[string]time.Duration) {
	per := func(i int, k string) float64 {
		return float64(cpu[i][k].Microseconds()) / 1000 / float64(max(len(phases[i].Lat), 1))
	}
	var names []string
	total := make([]float64, len(phases))
	seen := map[string]bool{}
	for i := range phases {
		for k := range cpu[i] {
			total[i] += per(i, k)
			if per(i, k) >= 0.1 && !seen[k] {
				seen[k] = true
				names = append(names, k)
			}
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		var x, y float64
		for i := range phases {
			x, y = max(x, per(i, a)), max(y, per(i, b))
		}
		return cmp.Or(cmp.Compare(y, x), cmp.Compare(a, b))
	})
	fmt.Fprintf(w, "\n%-22s", title)
	for _, p := range phases {
		fmt.Fprintf(w, " %22s", p.Name)
	}
	fmt.Fprintln(w)
	for _, k := range names {
		fmt.Fprintf(w, "%-22s", k)
		for i := range phases {
			fmt.Fprintf(w, " %19.2f ms", per(i, k))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-22s", "all processes")
	for i := range phases {
		fmt.Fprintf(w, " %19.2f ms", total[i])
	}
	fmt.Fprintln(w)
}
