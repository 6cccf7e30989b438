package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/sandq/sandq/jobs"
)

// progress reports a batch as results arrive. add is called serially.
type progress interface {
	add(r jobs.Result)
	// finish stops the display; the summary follows it.
	finish()
}

// progressCounts is what both displays show.
type progressCounts struct {
	start       time.Time
	total, done int
	failures    int // results other than succeeded
}

func (c *progressCounts) add(r jobs.Result) {
	c.done++
	if r.Status != jobs.StatusSucceeded {
		c.failures++
	}
}

// line is the plain progress line: done/total, failures, rate, ETA.
func (c *progressCounts) line(what string, now time.Time) string {
	elapsed := now.Sub(c.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(c.done) / s
	}
	eta := "unknown"
	if rate > 0 {
		eta = time.Duration(float64(c.total-c.done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if c.total > 0 {
		pct = 100 * float64(c.done) / float64(c.total)
	}
	return fmt.Sprintf("%s: %d/%d done (%.1f%%), %d failed, %.1f jobs/s, elapsed %s, ETA %s\n",
		what, c.done, c.total, pct, c.failures, rate, elapsed.Round(time.Second), eta)
}

// barProgress draws a progress bar on a terminal with
// github.com/schollz/progressbar/v3: count, rate and ETA, with the
// failures in the description.
type barProgress struct {
	w        io.Writer
	bar      *progressbar.ProgressBar
	counts   progressCounts
	what     string
	failures int
}

func newBarProgress(w io.Writer, what string, total int) *barProgress {
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("jobs"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	_ = bar.RenderBlank()
	return &barProgress{w: w, bar: bar, what: what, counts: progressCounts{start: time.Now(), total: total}}
}

func (p *barProgress) add(r jobs.Result) {
	p.counts.add(r)
	if p.counts.failures != p.failures {
		p.failures = p.counts.failures
		p.bar.Describe(fmt.Sprintf("%s (%d failed)", p.what, p.failures))
	}
	_ = p.bar.Add(1)
}

func (p *barProgress) finish() {
	if !p.bar.IsFinished() {
		_ = p.bar.Exit()
		_, _ = fmt.Fprintln(p.w)
	}
}

// plainProgress writes a progress line on every tick, for logs and
// pipes, and stays quiet when nothing changed since the last line.
type plainProgress struct {
	w      io.Writer
	what   string
	now    func() time.Time
	mu     sync.Mutex
	counts progressCounts
	last   int // done at the last line
	stop   chan struct{}
	done   chan struct{}
}

// newPlainProgress starts writing lines to w at every tick.
func newPlainProgress(w io.Writer, what string, total int, tick <-chan time.Time, now func() time.Time) *plainProgress {
	p := &plainProgress{w: w, what: what, now: now, counts: progressCounts{start: now(), total: total},
		last: -1, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-tick:
				p.report()
			}
		}
	}()
	return p
}

func (p *plainProgress) report() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts.done == p.last {
		return
	}
	p.last = p.counts.done
	_, _ = io.WriteString(p.w, p.counts.line(p.what, p.now()))
}

func (p *plainProgress) add(r jobs.Result) {
	p.mu.Lock()
	p.counts.add(r)
	p.mu.Unlock()
}

func (p *plainProgress) finish() {
	close(p.stop)
	<-p.done
}

// noProgress shows nothing.
type noProgress struct{}

func (noProgress) add(jobs.Result) {}
func (noProgress) finish()         {}
