// Package measure runs a job many times at a fixed concurrency and reports
// throughput and latency percentiles. The benchmarks use it to put several
// figures of one run side by side, as ratios: these machines are noisy, and
// only figures taken in the same run compare.
package measure

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is what one measurement saw.
type Phase struct {
	Name string
	Conc int
	Wall time.Duration
	Lat  []time.Duration // sorted
}

// Rate is jobs per second.
func (p Phase) Rate() float64 { return float64(len(p.Lat)) / p.Wall.Seconds() }

// Pct returns the q-quantile latency (0.5 for p50).
func (p Phase) Pct(q float64) time.Duration {
	if len(p.Lat) == 0 {
		return 0
	}
	return p.Lat[min(len(p.Lat)-1, int(float64(len(p.Lat))*q))]
}

// Run calls job n times over conc goroutines and returns the first error.
func Run(name string, n, conc int, job func() error) (Phase, error) {
	p := Phase{Name: name, Conc: conc, Lat: make([]time.Duration, n)}
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				if err := job(); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("%s: job %d: %w", name, i, err) })
				}
				p.Lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	p.Wall = time.Since(start)
	slices.Sort(p.Lat)
	return p, firstErr
}

// Job is a named job for Interleave and Turns.
type Job struct {
	Name string
	Run  func() error
	// Around, if set, is called around each of the job's turns in Turns
	// (turn runs them): where a benchmark reads the counters of the
	// phase's processes before and after.
	Around func(turn func())
}

// Interleave runs each job n times one at a time, taking turns job by job
// (who goes first rotates each round), and returns a Phase per job, its
// Wall the sum of its own latencies. The machine's drift during the run
// then falls on every job alike: what compares two paths' latency (a
// difference of p50s) where phases one after the other would compare two
// moments. It returns the first error.
func Interleave(n int, jobs ...Job) ([]Phase, error) {
	ps := make([]Phase, len(jobs))
	for k, j := range jobs {
		ps[k] = Phase{Name: j.Name, Conc: 1, Lat: make([]time.Duration, 0, n)}
	}
	var firstErr error
	for i := range n {
		for r := range jobs {
			k := (i + r) % len(jobs)
			t := time.Now()
			err := jobs[k].Run()
			d := time.Since(t)
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%s: job %d: %w", jobs[k].Name, i, err)
			}
			ps[k].Lat = append(ps[k].Lat, d)
			ps[k].Wall += d
		}
	}
	for k := range ps {
		slices.Sort(ps[k].Lat)
	}
	return ps, firstErr
}

// Turns measures each job's throughput at conc over n runs in turns: the
// runs go in rounds of n/turns a job, phase after phase (who goes first
// rotates each round, so the order is ABBA…), and each job's Phase holds
// all its latencies, its Wall the sum of its turns' walls. A drift of the
// machine over the run (these machines' rates move by a tenth between two
// phases of the same work) then falls on every job alike, where phases
// one after the other would compare two moments. Every turn is a Run, its
// ramp-up and tail included, so a turn should hold many more than conc
// jobs. It returns the first error.
func Turns(n, conc, turns int, jobs ...Job) ([]Phase, error) {
	turns = max(1, min(turns, n))
	ps := make([]Phase, len(jobs))
	for k, j := range jobs {
		ps[k] = Phase{Name: j.Name, Conc: conc, Lat: make([]time.Duration, 0, n)}
	}
	var firstErr error
	for r := range turns {
		m := n / turns
		if r < n%turns {
			m++ // the first n%turns rounds take one more
		}
		for i := range jobs {
			k := (r + i) % len(jobs)
			var p Phase
			var err error
			run := func() { p, err = Run(jobs[k].Name, m, conc, jobs[k].Run) }
			if jobs[k].Around != nil {
				jobs[k].Around(run)
			} else {
				run()
			}
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("turn %d: %w", r, err)
			}
			ps[k].Lat = append(ps[k].Lat, p.Lat...)
			ps[k].Wall += p.Wall
		}
	}
	for k := range ps {
		slices.Sort(ps[k].Lat)
	}
	return ps, firstErr
}

// Table writes phases as an aligned table.
func Table(w io.Writer, title string, phases ...Phase) {
	fmt.Fprintf(w, "\n%-22s %5s %6s %10s %10s %10s\n", title, "conc", "jobs", "jobs/s", "p50", "p99")
	for _, p := range phases {
		fmt.Fprintf(w, "%-22s %5d %6d %10.1f %10s %10s\n", p.Name, p.Conc, len(p.Lat), p.Rate(),
			p.Pct(0.50).Round(10*time.Microsecond), p.Pct(0.99).Round(10*time.Microsecond))
	}
}
