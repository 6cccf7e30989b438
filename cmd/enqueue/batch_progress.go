package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/sandq/sandq/batch"
	"github.com/sandq/sandq/jobs"
)

// progress reports a batch as results arrive. add is called serially.
type progress interface {
	add(r jobs.Result)
	// finish stops the display; the summary follows it.
	finish()
}

// barProgress draws a progress bar on a terminal with
// github.com/schollz/progressbar/v3: count, rate and ETA, with the
// failures in the description.
type barProgress struct {
	w        io.Writer
	bar      *progressbar.ProgressBar
	counts   batch.Progress
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
	return &barProgress{w: w, bar: bar, what: what, counts: batch.Progress{Start: time.Now(), Total: total}}
}

func (p *barProgress) add(r jobs.Result) {
	p.counts.Add(r)
	if p.counts.Failures != p.failures {
		p.failures = p.counts.Failures
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
	counts batch.Progress
	last   int // done at the last line
	stop   chan struct{}
	done   chan struct{}
}

// newPlainProgress starts writing lines to w at every tick.
func newPlainProgress(w io.Writer, what string, total int, tick <-chan time.Time, now func() time.Time) *plainProgress {
	p := &plainProgress{w: w, what: what, now: now, counts: batch.Progress{Start: now(), Total: total},
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
	if p.counts.Done == p.last {
		return
	}
	p.last = p.counts.Done
	_, _ = io.WriteString(p.w, p.counts.Line(p.what, p.now()))
}

func (p *plainProgress) add(r jobs.Result) {
	p.mu.Lock()
	p.counts.Add(r)
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
