package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandq/sandq/jobs"
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

// AppendStream appends entries to job id's stream in one round trip and
// sets its TTL. An end entry (Status set) must come last, and only once
// the final Result is stored.
func (s *Store) AppendStream(ctx context.Context, id string, ttl time.Duration, entries []jobs.StreamEntry) error {
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
		return fmt.Errorf("store: append to stream %s: %w", id, err)
	}
	return nil
}

// EndStream appends job id's end entry with its final status and sets the
// stream's TTL. Call it after the final Result is stored.
func (s *Store) EndStream(ctx context.Context, id string, attempt int, status jobs.Status, ttl time.Duration) error {
	return s.AppendStream(ctx, id, ttl, []jobs.StreamEntry{{Attempt: attempt, Status: status}})
}

// parseStreamEntry decodes one Redis Stream message.
func parseStreamEntry(m redis.XMessage) jobs.StreamEntry {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	e := jobs.StreamEntry{ID: m.ID, Attempt: int(num("a"))}
	if str("k") == "end" {
		e.Status = jobs.Status(str("st"))
		if e.Status == "" {
			e.Status = jobs.StatusInternalError // never written so: a broken entry still ends the stream
		}
		return e
	}
	e.Step, e.Stream, e.Offset, e.Dropped, e.Limit = str("step"), str("s"), num("o"), num("x"), str("l") == "1"
	if d := str("d"); d != "" {
		e.Data = []byte(d)
	}
	return e
}

// ReadStream reads job id's stream after the entry ID after, blocking up to
// block for entries when none are there; at most count. It returns none
// (and no error) when the block ends empty.
func (s *Store) ReadStream(ctx context.Context, id, after string, count int64, block time.Duration) ([]jobs.StreamEntry, error) {
	res, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{s.StreamKey(id), after}, Count: count, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []jobs.StreamEntry
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, parseStreamEntry(m))
		}
	}
	return out, nil
}

// RangeStream returns up to count entries of job id's stream after the
// entry ID after, without blocking.
func (s *Store) RangeStream(ctx context.Context, id, after string, count int64) ([]jobs.StreamEntry, error) {
	ms, err := s.rdb.XRangeN(ctx, s.StreamKey(id), "("+after, "+", count).Result()
	if err != nil {
		return nil, err
	}
	out := make([]jobs.StreamEntry, len(ms))
	for i, m := range ms {
		out[i] = parseStreamEntry(m)
	}
	return out, nil
}
