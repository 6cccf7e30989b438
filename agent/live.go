package agent

import (
	"sync"
	"time"
)

// live sends one step's output as it is written (Step.Live): both streams
// of the step, coalesced, never blocking the writers (the pipe drainers)
// on the worker. See LiveChunk.
type live struct {
	send    func(LiveChunk)
	step    int
	name    string
	streams [2]*liveStream
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// liveStream is one stream's bytes waiting to be sent.
type liveStream struct {
	name  string
	limit int64

	mu      sync.Mutex
	pos     int64  // stream offset of the next byte written
	buf     []byte // waiting bytes, contiguous from bufOff
	bufOff  int64
	pending int64     // bytes dropped just before bufOff, not yet reported
	gap     int64     // bytes dropped after the waiting ones (up to pos)
	since   time.Time // when the oldest waiting byte was written
	last    time.Time // when the last byte was written
	limited bool      // reached the limit: nothing more is taken
	ended   bool      // the Limit chunk was sent
}

// newLive starts the sender of step i's live output. limit is the step's
// output limit per stream.
func newLive(i int, name string, limit int, send func(LiveChunk)) *live {
	if limit <= 0 {
		limit = 1 << 20
	}
	l := &live{send: send, step: i, name: name, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	for k, n := range []string{"stdout", "stderr"} {
		l.streams[k] = &liveStream{name: n, limit: int64(limit)}
	}
	go l.loop()
	return l
}

// writer returns the writer of stream k (0 stdout, 1 stderr).
func (l *live) writer(k int) *liveWriter { return &liveWriter{l: l, s: l.streams[k]} }

type liveWriter struct {
	l *live
	s *liveStream
}

// Write takes p without ever blocking: it keeps what the buffer has room
// for and counts the rest as dropped.
func (w *liveWriter) Write(p []byte) (int, error) {
	n := len(p)
	s := w.s
	s.mu.Lock()
	if s.limited {
		s.mu.Unlock()
		return n, nil
	}
	if room := s.limit - s.pos; int64(len(p)) >= room {
		p, s.limited = p[:room], true
	}
	keep := p
	if s.gap > 0 && len(s.buf) > 0 {
		keep = nil // they would not follow the waiting bytes
	} else if room := LiveBuffer - len(s.buf); len(keep) > room {
		keep = keep[:room]
	}
	if len(keep) > 0 {
		if len(s.buf) == 0 {
			s.bufOff, s.pending, s.gap, s.since = s.pos, s.pending+s.gap, 0, time.Now()
		}
		s.buf = append(s.buf, keep...)
		s.last = time.Now()
	}
	s.gap += int64(len(p) - len(keep))
	s.pos += int64(len(p))
	due := len(s.buf) >= LiveChunkSize || s.limited
	s.mu.Unlock()
	if due {
		select {
		case w.l.kick <- struct{}{}:
		default:
		}
	}
	return n, nil
}

func (l *live) loop() {
	defer close(l.done)
	t := time.NewTicker(LiveIdle)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.flush(true)
			return
		case <-l.kick:
		case <-t.C:
		}
		l.flush(false)
	}
}

// flush sends every chunk that is due; with all, everything.
func (l *live) flush(all bool) {
	for _, s := range l.streams {
		for {
			s.mu.Lock()
			ch, ok := s.next(all)
			s.mu.Unlock()
			if !ok {
				break
			}
			ch.Step, ch.Name = l.step, l.name
			l.send(ch)
		}
	}
}

// next takes the stream's next chunk if it is due: LiveChunkSize bytes
// waiting, the oldest waiting LiveFlush, the stream quiet for LiveIdle
// (a line printed before a pause goes at once), the limit reached, or
// all. Held: s.mu.
func (s *liveStream) next(all bool) (LiveChunk, bool) {
	if s.ended {
		return LiveChunk{}, false
	}
	final := all || s.limited
	if len(s.buf) > 0 {
		if !final && len(s.buf) < LiveChunkSize && time.Since(s.since) < LiveFlush && time.Since(s.last) < LiveIdle {
			return LiveChunk{}, false
		}
		n := min(len(s.buf), LiveChunkSize)
		ch := LiveChunk{Stream: s.name, Offset: s.bufOff, Data: s.buf[:n:n], Dropped: s.pending}
		s.pending = 0
		s.buf, s.bufOff = s.buf[n:], s.bufOff+int64(n)
		if len(s.buf) == 0 {
			s.buf = nil
		}
		if s.limited && len(s.buf) == 0 && s.gap == 0 {
			ch.Limit, s.ended = true, true
		}
		return ch, true
	}
	if final && (s.gap+s.pending > 0 || s.limited) {
		// Nothing waits but dropped bytes, or the limit's mark.
		ch := LiveChunk{Stream: s.name, Offset: s.pos, Dropped: s.gap + s.pending, Limit: s.limited}
		s.gap, s.pending, s.ended = 0, 0, s.limited
		return ch, true
	}
	return LiveChunk{}, false
}

// close sends what is left and stops the sender.
func (l *live) close() {
	close(l.stop)
	<-l.done
}
