package client

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/sandq/sandq/jobs"
)

// Live output: see jobs.StreamEntry for what an entry holds, and the
// store for the Redis Stream that carries it.

// streamBlock is how long one XREAD of Client.Stream blocks; between two,
// it checks the job's status, for a job that ended without an end entry
// (its worker died, or Redis lost the entry).
const streamBlock = 2 * time.Second

// Stream yields job id's live output, entry by entry, after the entry ID
// after ("" or "0": from the start of what the stream still holds), and
// follows it until its end entry, which it yields last. A job that was not
// streamed, or whose stream has expired, yields its stored Result's output
// once the job is final (entries with FromResult), then the end. A job
// that ends without an end entry (its worker died, or Redis restarted and
// lost it) ends the iteration all the same, with the stored final status.
// Iteration stops at the first error (ctx ending, an unknown job,
// Redis failing), which it yields.
func (c *Client) Stream(ctx context.Context, id, after string) iter.Seq2[jobs.StreamEntry, error] {
	return func(yield func(jobs.StreamEntry, error) bool) {
		if !jobs.ValidID(id) {
			yield(jobs.StreamEntry{}, fmt.Errorf("client: stream %q: %w", id, jobs.ErrNotFound))
			return
		}
		if after == "" {
			after = "0"
		}
		seen := false   // an entry of the stream was read
		waited := false // a read after the job was found final
		for {
			res, err := c.store.ReadStream(ctx, id, after, 256, streamBlock)
			if err != nil {
				if ctx.Err() != nil {
					err = context.Cause(ctx)
				}
				yield(jobs.StreamEntry{}, fmt.Errorf("client: stream %s: %w", id, err))
				return
			}
			for _, e := range res {
				after, seen = e.ID, true
				if !yield(e, nil) || e.End() {
					return
				}
			}
			if len(res) > 0 {
				continue
			}
			// Nothing new for a while: has the job ended without an end
			// entry to read?
			r, err := c.Get(ctx, id)
			if err != nil {
				yield(jobs.StreamEntry{}, fmt.Errorf("client: stream %s: %w", id, err))
				return
			}
			if !r.Status.Final() {
				continue
			}
			if seen && !waited {
				// The worker writes the end entry (and maybe the last
				// chunks) just after the final Result: give it one more
				// read.
				waited = true
				continue
			}
			// Entries written between the last read and the final Result
			// (stored after them) are there now: read them to the end.
			for {
				ms, err := c.store.RangeStream(ctx, id, after, 256)
				if err != nil {
					yield(jobs.StreamEntry{}, fmt.Errorf("client: stream %s: %w", id, err))
					return
				}
				for _, e := range ms {
					after, seen = e.ID, true
					if !yield(e, nil) || e.End() {
						return
					}
				}
				if len(ms) < 256 {
					break
				}
			}
			if !seen {
				for _, e := range resultEntries(r) {
					if !yield(e, nil) {
						return
					}
				}
			}
			yield(jobs.StreamEntry{Status: r.Status, Attempt: r.Attempts}, nil)
			return
		}
	}
}

// resultEntries are the output entries of a stored Result: its compile
// step's streams, then its run's.
func resultEntries(r jobs.Result) []jobs.StreamEntry {
	var out []jobs.StreamEntry
	add := func(step string, o jobs.Output) {
		for _, s := range []struct {
			name string
			get  func() ([]byte, error)
		}{{"stdout", o.StdoutBytes}, {"stderr", o.StderrBytes}} {
			if b, err := s.get(); err == nil && len(b) > 0 {
				out = append(out, jobs.StreamEntry{Attempt: r.Attempts, Step: step, Stream: s.name, Data: b, FromResult: true})
			}
		}
	}
	if r.Compile != nil {
		add("compile", r.Compile.Output)
	}
	add("run", r.Output)
	return out
}

// StreamRange returns what job id's live output holds now after the entry
// ID after, without waiting for more: the end entry is last if the job
// has ended. A final job whose stream is gone (never streamed, or expired)
// gives its stored Result's output and the end, as Stream does.
func (c *Client) StreamRange(ctx context.Context, id, after string) ([]jobs.StreamEntry, error) {
	if !jobs.ValidID(id) {
		return nil, fmt.Errorf("client: stream %q: %w", id, jobs.ErrNotFound)
	}
	r, err := c.Get(ctx, id) // first: entries stored before a final Result are all there
	if err != nil {
		return nil, fmt.Errorf("client: stream %s: %w", id, err)
	}
	if after == "" {
		after = "0"
	}
	var out []jobs.StreamEntry
	for {
		ms, err := c.store.RangeStream(ctx, id, after, 1024)
		if err != nil {
			return nil, fmt.Errorf("client: stream %s: %w", id, err)
		}
		for _, e := range ms {
			out, after = append(out, e), e.ID
			if e.End() {
				return out, nil
			}
		}
		if len(ms) < 1024 {
			break
		}
	}
	if !r.Status.Final() {
		return out, nil
	}
	if after == "0" {
		out = resultEntries(r)
	}
	return append(out, jobs.StreamEntry{Status: r.Status, Attempt: r.Attempts}), nil
}
