package worker

import (
	"context"
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
// (jobs.Store.AppendStream). push never blocks: the sandbox's reader calls
// it for every chunk, and the program must never wait on Redis. A writer
// goroutine sends what is queued, in batches; what it cannot send (the
// queue full, Redis failing) is lost and counted: each entry's Dropped is
// the gap between its offset and the end of the last entry of its stream
// that Redis took, and close adds an entry for a gap at a stream's end.
type liveOutput struct {
	store   *jobs.Store
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
	written map[string]int64 // per step/stream: offset after what Redis took (writer only)
}

type liveEnd struct {
	step, stream string
	end          int64
	limit        bool
}

func newLiveOutput(store *jobs.Store, id string, attempt int, ttl time.Duration, log zerolog.Logger) *liveOutput {
	l := &liveOutput{store: store, id: id, attempt: attempt, ttl: ttl, log: log,
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

func (l *liveOutput) loop() {
	defer close(l.done)
	for {
		select {
		case <-l.kick:
			l.write()
		case <-l.stop:
			l.write()
			return
		}
	}
}

// write sends what is queued in one round trip, with each entry's Dropped
// computed from what Redis already took.
func (l *liveOutput) write() {
	l.mu.Lock()
	batch := l.queue
	l.queue, l.bytes = nil, 0
	l.mu.Unlock()
	l.send(batch)
}

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

// close sends what is queued, then an entry for each stream whose end was
// lost (the gap, and the limit mark if it was among the lost), and stops
// the writer. Call it when the run is over, before the final result is
// stored.
func (l *liveOutput) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(2 * liveWriteTimeout):
		return // Redis is not answering: the reader ends at the final status
	}
	var tail []jobs.StreamEntry
	for key, s := range l.seen {
		if s.end > l.written[key] {
			tail = append(tail, jobs.StreamEntry{Attempt: l.attempt, Step: s.step, Stream: s.stream, Offset: s.end, Limit: s.limit})
		}
	}
	l.send(tail)
}

// end appends the end entry, after the final result is stored.
func (l *liveOutput) end(status jobs.Status) {
	l.close()
	ctx, cancel := context.WithTimeout(context.Background(), liveWriteTimeout)
	defer cancel()
	if err := l.store.EndStream(ctx, l.id, l.attempt, status, l.ttl); err != nil {
		l.log.Debug().Err(err).Msg("live output: end entry not written")
	}
}
