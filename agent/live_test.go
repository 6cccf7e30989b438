package agent

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// reassemble checks a stream's chunks (in order, offsets consistent with
// the data and drops) and returns the bytes they carry, with dropped bytes
// as zeros, and the total dropped.
func reassemble(t *testing.T, chunks []LiveChunk) ([]byte, int64, bool) {
	t.Helper()
	var out []byte
	var dropped int64
	limit := false
	for i, ch := range chunks {
		require.False(t, limit, "nothing after the Limit chunk")
		require.Equal(t, int64(len(out))+ch.Dropped, ch.Offset, "chunk %d: offset follows the bytes and drops before it", i)
		out = append(out, make([]byte, ch.Dropped)...)
		out = append(out, ch.Data...)
		dropped += ch.Dropped
		limit = ch.Limit
		require.LessOrEqual(t, len(ch.Data), LiveChunkSize)
	}
	return out, dropped, limit
}

type chunkLog struct {
	mu     sync.Mutex
	chunks map[string][]LiveChunk
	first  chan struct{}
	once   sync.Once
	block  chan struct{} // send waits on it when set
	last   map[string][]bool
	// closing is set by a test before it calls close; atClose records it
	// for each chunk.
	closing atomic.Bool
	atClose map[string][]bool
}

// send records ch; first is closed once the first chunk is recorded (not
// before: a test reading the log after first must find it).
func (c *chunkLog) send(ch LiveChunk, last bool) {
	if c.block != nil {
		<-c.block
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch.Data = bytes.Clone(ch.Data)
	c.chunks[ch.Stream] = append(c.chunks[ch.Stream], ch)
	c.last[ch.Stream] = append(c.last[ch.Stream], last)
	c.atClose[ch.Stream] = append(c.atClose[ch.Stream], c.closing.Load())
	c.once.Do(func() { close(c.first) })
}

func newChunkLog() *chunkLog {
	return &chunkLog{chunks: map[string][]LiveChunk{}, first: make(chan struct{}), last: map[string][]bool{}, atClose: map[string][]bool{}}
}

func TestLiveCoalescesAndKeepsEveryByte(t *testing.T) {
	t.Parallel()
	log := newChunkLog()
	l := newLive(2, "run", 1<<20, log.send)
	out, errw := l.writer(0), l.writer(1)
	var want, wantErr []byte
	for i := range 2000 {
		line := []byte(time.Duration(i).String() + " line of output\n")
		want = append(want, line...)
		_, _ = out.Write(line)
		if i%100 == 0 {
			wantErr = append(wantErr, 'E', byte(i))
			_, _ = errw.Write([]byte{'E', byte(i)})
		}
	}
	l.close()
	got, dropped, limit := reassemble(t, log.chunks["stdout"])
	require.Equal(t, want, got)
	require.Zero(t, dropped)
	require.False(t, limit)
	require.Less(t, len(log.chunks["stdout"]), 2000/10, "coalesced, not one chunk per write")
	gotErr, _, _ := reassemble(t, log.chunks["stderr"])
	require.Equal(t, wantErr, gotErr)
	for _, ch := range log.chunks["stdout"] {
		require.Equal(t, 2, ch.Step)
		require.Equal(t, "run", ch.Name)
	}
}

func TestLiveFlushesSmallWritesSoon(t *testing.T) {
	t.Parallel()
	log := newChunkLog()
	l := newLive(0, "run", 1<<20, log.send)
	defer l.close()
	_, _ = l.writer(0).Write([]byte("hello\n"))
	select {
	case <-log.first:
	case <-time.After(10 * LiveFlush):
		t.Fatal("a small write was not sent within its flush interval")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Equal(t, "hello\n", string(log.chunks["stdout"][0].Data))
	require.False(t, log.last["stdout"][0], "a chunk sent while the step runs is not held for the step's end")
}

// TestLiveLastChunksGoWithTheResult: the chunks sent as the step ends
// (close) are marked last (the server queues them to go in one write with
// the step's output and result); none sent before close is.
func TestLiveLastChunksGoWithTheResult(t *testing.T) {
	t.Parallel()
	atEnd := 0
	for range 20 {
		log := newChunkLog()
		l := newLive(0, "run", 1<<20, log.send)
		_, _ = l.writer(0).Write([]byte("early\n"))
		<-log.first
		_, _ = l.writer(0).Write([]byte("late"))
		_, _ = l.writer(1).Write([]byte("err"))
		log.closing.Store(true)
		l.close()
		log.mu.Lock()
		got, _, _ := reassemble(t, log.chunks["stdout"])
		require.Equal(t, "early\nlate", string(got))
		gotErr, _, _ := reassemble(t, log.chunks["stderr"])
		require.Equal(t, "err", string(gotErr))
		require.False(t, log.last["stdout"][0], "sent while the step runs")
		for _, stream := range []string{"stdout", "stderr"} {
			for i, last := range log.last[stream] {
				require.True(t, !last || log.atClose[stream][i], "%s chunk %d marked last before close", stream, i)
			}
		}
		if n := len(log.last["stdout"]); log.last["stdout"][n-1] {
			atEnd++ // the late bytes went with close (not by the timer: the close came first)
		}
		log.mu.Unlock()
	}
	require.Positive(t, atEnd, "in none of 20 runs did close send the late bytes marked last")
}

func TestLiveStopsAtTheLimit(t *testing.T) {
	t.Parallel()
	log := newChunkLog()
	l := newLive(0, "run", 1000, log.send)
	w := l.writer(0)
	for range 30 {
		n, err := w.Write(bytes.Repeat([]byte("x"), 100))
		require.NoError(t, err)
		require.Equal(t, 100, n, "the program's writes always succeed")
	}
	l.close()
	got, dropped, limit := reassemble(t, log.chunks["stdout"])
	require.Equal(t, bytes.Repeat([]byte("x"), 1000), got)
	require.Zero(t, dropped)
	require.True(t, limit, "the last chunk marks the limit")
	require.Empty(t, log.chunks["stderr"], "an empty stream sends nothing")
}

// TestLiveNeverBlocksTheWriter: with the worker not reading at all, the
// program's writes go on; what does not fit the buffer is dropped, counted,
// and the stream stays reassemblable with the drops where they were.
func TestLiveNeverBlocksTheWriter(t *testing.T) {
	t.Parallel()
	log := newChunkLog()
	log.block = make(chan struct{})
	l := newLive(0, "run", 16<<20, log.send)
	w := l.writer(0)
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 31)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for off := 0; off < len(data); off += 4096 {
			_, _ = w.Write(data[off : off+4096])
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer blocked on a worker that does not read")
	}
	close(log.block)
	l.close()
	got, dropped, _ := reassemble(t, log.chunks["stdout"])
	require.Len(t, got, len(data), "offsets account for every byte")
	require.Positive(t, dropped)
	require.Less(t, dropped, int64(len(data)))
	// Every byte that was sent is the program's byte at that offset.
	chunks := log.chunks["stdout"]
	for _, ch := range chunks {
		require.True(t, bytes.Equal(data[ch.Offset:ch.Offset+int64(len(ch.Data))], ch.Data), "chunk at %d", ch.Offset)
	}
}

// TestLiveSleepsWithoutOutput: the sender does not wake while the step
// writes nothing (each wake takes the CPU from the job's process), nor
// for a small write until its bytes fall due (the write sets its timer).
func TestLiveSleepsWithoutOutput(t *testing.T) {
	t.Parallel()
	log := newChunkLog()
	l := newLive(0, "run", 1<<20, log.send)
	time.Sleep(10 * LiveIdle)
	require.Zero(t, l.wakes.Load(), "no output, no wake")
	_, _ = l.writer(0).Write([]byte("a"))
	_, _ = l.writer(0).Write([]byte("b"))
	require.Zero(t, l.wakes.Load(), "a small write does not wake the sender")
	<-log.first
	time.Sleep(10 * LiveIdle)
	require.LessOrEqual(t, l.wakes.Load(), int64(2), "the timer when the bytes fell due")
	l.close()
	got, _, _ := reassemble(t, log.chunks["stdout"])
	require.Equal(t, "ab", string(got))
}
