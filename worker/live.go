package worker

import (
	"context"
	"github.com/sandq/sandq/internal/store"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
)

// Live output bounds: what one job's live output may hold in the worker
// while Redis is slow or away. Past them chunks are dropped, and the
// stream says how many bytes (jobs.StreamEntry.Dropped).
const (
	liveQueueBytes   = 1 << 20
	liveQueueEntries = 1024
	liveWriteTimeout = 2 * time.Second
)

// liveOutput writes one attempt's live output to the job's Redis Stream
// (store.Store.AppendStream). push never blocks: the sandbox's reader calls
// it for every chunk, and the program must never wait on Redis. A writer
// goroutine sends what is queued, in batches and in order, then the end
// entry (finish); what it cannot send (the queue full, Redis failing) is
// lost and counted: each entry's Dropped is the gap between its offset and
// the end of the last entry of its stream that Redis took, and an entry
// closes a stream whose end was lost.
type liveOutput struct {
	store   *store.Store
	id      string
	attempt int
	ttl     time.Duration
	log     zerolog.Logger

	mu      sync.Mutex
	queue   []jobs.StreamEntry
	bytes   int
	seen    map[string]liveEnd // per step/stream: where the chunks seen end
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  bool
	status  jobs.Status      // the end entry's, set by finish
	written map[string]int64 // per step/stream: offset after what Redis took (writer only)
}

type liveEnd struct {
	step, stream string
	end          int64
	limit        bool
}

func newLiveOutput(st *store.Store, id string, attempt int, ttl time.Duration, log zerolog.Logger) *liveOutput {
	l := &liveOutput{store: st, id: id, attempt: attempt, ttl: ttl, log: log,
		seen: map[string]liveEnd{}, written: map[string]int64{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

// push queues a chunk, or drops it when the queue is full. It never blocks.
func (l *liveOutput) push(ch agent.LiveChunk) {
	key := ch.Name + "/" + ch.Stream
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.seen[key] = liveEnd{step: ch.Name, stream: ch.Stream, end: ch.Offset + int64(len(ch.Data)), limit: ch.Limit}
	if l.bytes+len(ch.Data) <= liveQueueBytes && len(l.queue) < liveQueueEntries {
		l.queue = append(l.queue, jobs.StreamEntry{Attempt: l.attempt, Step: ch.Name, Stream: ch.Stream,
			Offset: ch.Offset, Data: ch.Data, Limit: ch.Limit})
		l.bytes += len(ch.Data)
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// liveBatchDelay is how long the writer lets chunks gather after the first
// before it writes them: a short job's output and its end go in one round
// trip.
const liveBatchDelay = 5 * time.Millisecond

func (l *liveOutput) loop() {
	defer close(l.done)
	var gather <-chan time.Time
	for {
		select {
		case <-l.kick:
			if gather == nil {
				gather = time.After(liveBatchDelay)
			}
		case <-gather:
			gather = nil
			l.send(l.take())
		case <-l.stop:
			// The rest, the streams' closing entries and the end, in one
			// round trip.
			batch := l.take()
			l.mu.Lock()
			status := l.status
			l.mu.Unlock()
			batch = append(batch, l.closing(batch)...)
			if status != "" {
				batch = append(batch, jobs.StreamEntry{Attempt: l.attempt, Status: status})
			}
			l.send(batch)
			return
		}
	}
}

// take returns the queued entries and empties the queue.
func (l *liveOutput) take() []jobs.StreamEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.queue
	l.queue, l.bytes = nil, 0
	return batch
}

// send writes batch in one round trip, with each entry's Dropped computed
// from what Redis already took. Writer only.
func (l *liveOutput) send(batch []jobs.StreamEntry) {
	if len(batch) == 0 {
		return
	}
	written := make(map[string]int64, len(l.written))
	for k, v := range l.written {
		written[k] = v
	}
	for i := range batch {
		e := &batch[i]
		if e.End() {
			continue
		}
		key := e.Step + "/" + e.Stream
		e.Dropped = max(e.Offset-written[key], 0)
		written[key] = e.Offset + int64(len(e.Data))
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveWriteTimeout)
	defer cancel()
	if err := l.store.AppendStream(ctx, l.id, l.ttl, batch); err != nil {
		// Lost: the next entries of these streams report the gap.
		l.log.Debug().Err(err).Int("entries", len(batch)).Msg("live output not written")
		return
	}
	l.written = written
}

// closing returns an entry for each stream whose end is not among what
// Redis took or batch holds (the gap, and the limit mark if it was among
// the lost). Writer only.
func (l *liveOutput) closing(batch []jobs.StreamEntry) []jobs.StreamEntry {
	ends := make(map[string]int64, len(l.written))
	for k, v := range l.written {
		ends[k] = v
	}
	for _, e := range batch {
		ends[e.Step+"/"+e.Stream] = e.Offset + int64(len(e.Data))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var tail []jobs.StreamEntry
	for key, s := range l.seen {
		if s.end > ends[key] {
			tail = append(tail, jobs.StreamEntry{Attempt: l.attempt, Step: s.step, Stream: s.stream, Offset: s.end, Limit: s.limit})
		}
	}
	return tail
}

// finish stops taking chunks; the writer sends what is queued, closes the
// streams, and, with a status (the final result is stored), appends the end
// entry, then stops. It does not wait: the job's result never waits on
// Redis for its live output. A second finish does nothing.
func (l *liveOutput) finish(status jobs.Status) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed, l.status = true, status
	l.mu.Unlock()
	close(l.stop)
}
