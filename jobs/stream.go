package jobs

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Live output. A job enqueued with Stream has its compile and run steps'
// stdout and stderr appended, while they run, to the Redis Stream
// "<prefix>:stream:<id>", one entry per chunk (the agent coalesces: a chunk
// goes at 16 KiB or 50 ms), and a last entry with the final status once
// the final Result is stored. The stream is capped in length (MaxLen
// entries, approximately: the oldest go first) and expires StreamTTL after
// its last write. Any Redis client can read it (XRANGE, XREAD BLOCK):
//
//	k      "out" or "end"
//	a      the attempt number (a retried attempt starts its streams again)
//	step   "compile" or "run" (out)
//	s      "stdout" or "stderr" (out)
//	o      offset of d in the step's stream (out)
//	d      the bytes, exact (out; may be empty)
//	x      bytes left out just before o: the agent's or the worker's buffer
//	       was full, or Redis was not answering (out; absent when 0)
//	l      "1" on a stream's last entry when it reached output_bytes (out)
//	st     the final status (end)
//
// Writing it never blocks a job: a worker drops what it cannot write and
// says how much (x).

// StreamMaxLen caps a job's stream in entries (approximately).
const StreamMaxLen = 10_000

// DefaultStreamTTL is how long a job's stream stays after its last write.
const DefaultStreamTTL = time.Hour

// StreamEntry is one entry of a job's live output: a chunk of one step's
// stream, or the end.
type StreamEntry struct {
	// ID is the entry's ID in the Redis Stream; pass it to Client.Stream
	// to resume after it. Empty for entries made from a stored Result.
	ID string `json:"id,omitempty"`
	// Attempt is the worker attempt that wrote it (1 unless the job was
	// retried after an infrastructure fault: its steps then start again).
	Attempt int `json:"attempt,omitempty"`
	// Step is "compile" or "run"; empty on the end entry.
	Step string `json:"step,omitempty"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream,omitempty"`
	// Offset is where Data starts in the step's stream.
	Offset int64 `json:"offset"`
	// Data is the chunk's bytes, exact.
	Data []byte `json:"data,omitempty"`
	// Dropped counts bytes left out just before Offset.
	Dropped int64 `json:"dropped,omitempty"`
	// Limit marks a stream's last entry: it reached output_bytes and no
	// more of it is streamed (the Result keeps its head and tail).
	Limit bool `json:"limit,omitempty"`
	// Status is set on the end entry only: the job's final status. It is
	// the last entry.
	Status Status `json:"status,omitempty"`
	// FromResult marks entries made from the stored Result, for a job
	// that was not streamed or whose stream has expired: its kept output
	// (head and tail, when truncated, with the marker between).
	FromResult bool `json:"from_result,omitempty"`
}

// End reports whether e is the end entry.
func (e StreamEntry) End() bool { return e.Status != "" }

// StreamKey returns the key of job id's live output: "<prefix>:stream:<id>".
func (s *Store) StreamKey(id string) string { return s.prefix + ":stream:" + id }

// AppendStream appends entries to job id's stream in one round trip and
// sets its TTL. An end entry (Status set) must come last, and only once
// the final Result is stored.
func (s *Store) AppendStream(ctx context.Context, id string, ttl time.Duration, entries []StreamEntry) error {
	key := s.StreamKey(id)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range entries {
			if e.End() {
				p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: StreamMaxLen, Approx: true,
					Values: []any{"k", "end", "a", e.Attempt, "st", string(e.Status)}})
				continue
			}
			vals := []any{"k", "out", "a", e.Attempt, "step", e.Step, "s", e.Stream, "o", e.Offset, "d", e.Data}
			if e.Dropped > 0 {
				vals = append(vals, "x", e.Dropped)
			}
			if e.Limit {
				vals = append(vals, "l", "1")
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: StreamMaxLen, Approx: true, Values: vals})
		}
		p.PExpire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("jobs: append to stream %s: %w", id, err)
	}
	return nil
}

// EndStream appends job id's end entry with its final status and sets the
// stream's TTL. Call it after the final Result is stored.
func (s *Store) EndStream(ctx context.Context, id string, attempt int, status Status, ttl time.Duration) error {
	return s.AppendStream(ctx, id, ttl, []StreamEntry{{Attempt: attempt, Status: status}})
}

// parseStreamEntry decodes one Redis Stream message.
func parseStreamEntry(m redis.XMessage) StreamEntry {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	e := StreamEntry{ID: m.ID, Attempt: int(num("a"))}
	if str("k") == "end" {
		e.Status = Status(str("st"))
		if e.Status == "" {
			e.Status = StatusInternalError // never written so: a broken entry still ends the stream
		}
		return e
	}
	e.Step, e.Stream, e.Offset, e.Dropped, e.Limit = str("step"), str("s"), num("o"), num("x"), str("l") == "1"
	if d := str("d"); d != "" {
		e.Data = []byte(d)
	}
	return e
}

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
func (c *Client) Stream(ctx context.Context, id, after string) iter.Seq2[StreamEntry, error] {
	return func(yield func(StreamEntry, error) bool) {
		if !ValidID(id) {
			yield(StreamEntry{}, fmt.Errorf("jobs: stream %q: %w", id, ErrNotFound))
			return
		}
		if after == "" {
			after = "0"
		}
		key := c.store.StreamKey(id)
		seen := false   // an entry of the stream was read
		waited := false // a read after the job was found final
		for {
			res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, after}, Count: 256, Block: streamBlock}).Result()
			switch {
			case errors.Is(err, redis.Nil):
			case err != nil:
				if ctx.Err() != nil {
					err = context.Cause(ctx)
				}
				yield(StreamEntry{}, fmt.Errorf("jobs: stream %s: %w", id, err))
				return
			}
			for _, st := range res {
				for _, m := range st.Messages {
					e := parseStreamEntry(m)
					after, seen = m.ID, true
					if !yield(e, nil) || e.End() {
						return
					}
				}
			}
			if len(res) > 0 {
				continue
			}
			// Nothing new for a while: has the job ended without an end
			// entry to read?
			r, err := c.Get(ctx, id)
			if err != nil {
				yield(StreamEntry{}, fmt.Errorf("jobs: stream %s: %w", id, err))
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
				ms, err := c.rdb.XRangeN(ctx, key, "("+after, "+", 256).Result()
				if err != nil {
					yield(StreamEntry{}, fmt.Errorf("jobs: stream %s: %w", id, err))
					return
				}
				for _, m := range ms {
					e := parseStreamEntry(m)
					after, seen = m.ID, true
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
			yield(StreamEntry{Status: r.Status, Attempt: r.Attempts}, nil)
			return
		}
	}
}

// resultEntries are the output entries of a stored Result: its compile
// step's streams, then its run's.
func resultEntries(r Result) []StreamEntry {
	var out []StreamEntry
	add := func(step string, o Output) {
		for _, s := range []struct {
			name string
			get  func() ([]byte, error)
		}{{"stdout", o.StdoutBytes}, {"stderr", o.StderrBytes}} {
			if b, err := s.get(); err == nil && len(b) > 0 {
				out = append(out, StreamEntry{Attempt: r.Attempts, Step: step, Stream: s.name, Data: b, FromResult: true})
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
func (c *Client) StreamRange(ctx context.Context, id, after string) ([]StreamEntry, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("jobs: stream %q: %w", id, ErrNotFound)
	}
	r, err := c.Get(ctx, id) // first: entries stored before a final Result are all there
	if err != nil {
		return nil, fmt.Errorf("jobs: stream %s: %w", id, err)
	}
	if after == "" {
		after = "0"
	}
	key := c.store.StreamKey(id)
	var out []StreamEntry
	for {
		ms, err := c.rdb.XRangeN(ctx, key, "("+after, "+", 1024).Result()
		if err != nil {
			return nil, fmt.Errorf("jobs: stream %s: %w", id, err)
		}
		for _, m := range ms {
			e := parseStreamEntry(m)
			out, after = append(out, e), m.ID
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
	return append(out, StreamEntry{Status: r.Status, Attempt: r.Attempts}), nil
}
