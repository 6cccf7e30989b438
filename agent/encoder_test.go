package agent

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeLog records each Write call the encoder makes.
type writeLog struct{ writes [][]byte }

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// TestEncoderQueueGoesWithTheNextEncode: queued frames are not written
// until a frame is encoded, and then all of them go in one write, in order.
func TestEncoderQueueGoesWithTheNextEncode(t *testing.T) {
	var w writeLog
	enc := NewEncoder(&w)
	require.NoError(t, enc.Queue(Response{ID: 1, Op: OpOutput, Output: &OutputChunk{Stream: "stdout", Data: []byte("1\n")}}))
	require.NoError(t, enc.Queue(Response{ID: 1, Op: OpLive, Live: &LiveChunk{Stream: "stdout", Data: []byte("1\n")}}))
	require.Empty(t, w.writes, "queued frames wait for the next Encode")
	require.NoError(t, enc.Encode(Response{ID: 1, Op: OpRunResult, Run: &RunResult{}}))
	require.Len(t, w.writes, 1, "the queued frames and the encoded one go in one write")

	dec := NewDecoder(bytes.NewReader(w.writes[0]))
	var ops []string
	for {
		var r Response
		err := dec.Decode(&r)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		ops = append(ops, r.Op)
	}
	require.Equal(t, []string{OpOutput, OpLive, OpRunResult}, ops)

	require.NoError(t, enc.Encode(Response{ID: 2, Op: OpReady}))
	require.Len(t, w.writes, 2, "an Encode with nothing queued is one write of its own")
}

// TestEncoderQueueNeverHoldsMoreThanItsBuffer: frames queued past the
// buffer go out without waiting for an Encode; none is lost or reordered.
func TestEncoderQueueNeverHoldsMoreThanItsBuffer(t *testing.T) {
	var w writeLog
	enc := NewEncoder(&w)
	data := bytes.Repeat([]byte("x"), 1000)
	for i := range 200 {
		require.NoError(t, enc.Queue(Response{ID: uint64(i), Op: OpOutput, Output: &OutputChunk{Data: data}}))
	}
	require.NotEmpty(t, w.writes, "200 KB queued: the buffer (64 KiB) was written when full")
	require.NoError(t, enc.Encode(Response{ID: 200, Op: OpRunResult, Run: &RunResult{}}))
	dec := NewDecoder(bytes.NewReader(bytes.Join(w.writes, nil)))
	for i := range 201 {
		var r Response
		require.NoError(t, dec.Decode(&r))
		require.Equal(t, uint64(i), r.ID)
	}
}
