package agent

import (
	"sync"
	"sync/atomic"
	"time"
)

// live sends one step's output as it is written (Step.Live): both streams
// of the step, coalesced, never blocking the writers (the pipe drainers)
// on the worker. See LiveChunk.
type live struct {
	send    func(ch LiveChunk, last bool)
	step    int
	name    string
	streams [2]*liveStream
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	timer   *time.Timer  // when the bytes waiting fall due (set by writers and the sender)
	wakes   atomic.Int64 // times the sender woke before close (tests)
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
// output limit per stream. send gets last set for the chunks sent as the
// step ends (close): the step's output and result follow them at once.
func newLive(i int, name string, limit int, send func(ch LiveChunk, last bool)) *live {
	if limit <= 0 {
		limit = 1 << 20
	}
	l := &live{send: send, step: i, name: name, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), timer: time.NewTimer(time.Hour)}
	l.timer.Stop()
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
	first := false // the first byte waiting: the sender's timer is set
	if len(keep) > 0 {
		if len(s.buf) == 0 {
			s.bufOff, s.pending, s.gap, s.since = s.pos, s.pending+s.gap, 0, time.Now()
			first = true
		}
		s.buf = append(s.buf, keep...)
		s.last = time.Now()
	}
	s.gap += int64(len(p) - len(keep))
	s.pos += int64(len(p))
	due := len(s.buf) >= LiveChunkSize || s.limited
	s.mu.Unlock()
	if first && !due {
		// Due in LiveIdle at the soonest: the sender's timer, not a
		// wake now.
		w.l.timer.Reset(LiveIdle)
		return n, nil
	}
	if due {
		select {
		case w.l.kick <- struct{}{}:
		default:
		}
	}
	return n, nil
}

// loop sends the chunks as they fall due. It wakes only for output: a
// write that fills a chunk kicks it, one that leaves the first byte
// waiting sets its timer (LiveIdle), and each wake sets the timer for when
// the bytes still waiting fall due. A step that writes
// nothing, or writes only as it ends, never wakes it before close (a
// ticker here woke the agent every LiveIdle through every step, and each
// wake took the CPU from the job's process: +2.5 ms on a 25 ms job).
func (l *live) loop() {
	defer close(l.done)
	defer l.timer.Stop()
	for {
		select {
		case <-l.stop:
			l.flush(true)
			return
		case <-l.kick:
		case <-l.timer.C:
		}
		l.wakes.Add(1)
		if wait := l.flush(false); wait > 0 {
			l.timer.Reset(wait)
		}
	}
}

// flush sends every chunk that is due; with all, everything. It returns
// how long until the first of the bytes still waiting falls due, 0 if none
// wait.
func (l *live) flush(all bool) time.Duration {
	var wait time.Duration
	for _, s := range l.streams {
		for {
			s.mu.Lock()
			ch, ok := s.next(all)
			if !ok && len(s.buf) > 0 {
				d := max(min(time.Until(s.since.Add(LiveFlush)), time.Until(s.last.Add(LiveIdle))), time.Millisecond/10)
				if wait == 0 || d < wait {
					wait = d
				}
			}
			s.mu.Unlock()
			if !ok {
				break
			}
			ch.Step, ch.Name = l.step, l.name
			l.send(ch, all)
		}
	}
	return wait
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
