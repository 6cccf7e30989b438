package batch

import (
	"fmt"
	"time"

	"github.com/sandq/sandq/jobs"
)

// Progress counts a batch's results as they arrive: what a progress
// display shows.
type Progress struct {
	Start time.Time
	// Total is the jobs expected, Done those with a result, Failures those
	// whose result is not succeeded.
	Total, Done, Failures int
}

// Add counts r.
func (p *Progress) Add(r jobs.Result) {
	p.Done++
	if r.Status != jobs.StatusSucceeded {
		p.Failures++
	}
}

// Rate is results per second since Start.
func (p *Progress) Rate(now time.Time) float64 {
	if s := now.Sub(p.Start).Seconds(); s > 0 {
		return float64(p.Done) / s
	}
	return 0
}

// Line is a one-line report: done/total, failures, rate, elapsed, ETA.
func (p *Progress) Line(what string, now time.Time) string {
	elapsed := now.Sub(p.Start)
	rate := p.Rate(now)
	eta := "unknown"
	if rate > 0 {
		eta = time.Duration(float64(p.Total-p.Done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if p.Total > 0 {
		pct = 100 * float64(p.Done) / float64(p.Total)
	}
	return fmt.Sprintf("%s: %d/%d done (%.1f%%), %d failed, %.1f jobs/s, elapsed %s, ETA %s\n",
		what, p.Done, p.Total, pct, p.Failures, rate, elapsed.Round(time.Second), eta)
}
