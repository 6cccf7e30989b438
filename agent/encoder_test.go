package agent

import (
	"bytes"
	"encoding/json"
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

// TestEncoderSendsBulkRaw: a message's bulk bytes travel raw after its
// JSON (not as base64 inside it), come back whole, and the sender's chunk
// is left as it was.
func TestEncoderSendsBulkRaw(t *testing.T) {
	data := bytes.Repeat([]byte{0, 0xff, 'x'}, 100_000)
	msgs := []Response{
		{ID: 1, Op: OpArtifact, Artifact: &ArtifactChunk{Name: "a.bin", Size: int64(len(data)), Data: data, Last: true}},
		{ID: 1, Op: OpOutput, Output: &OutputChunk{Stream: "stdout", Data: data}},
		{ID: 1, Op: OpLive, Live: &LiveChunk{Stream: "stderr", Data: data}},
		{ID: 1, Op: OpEgress, Egress: &EgressFrame{Conn: 2, Data: data}},
		{ID: 1, Op: OpFileDone, File: &File{Path: "f", Data: data}},
	}
	for _, m := range msgs {
		t.Run(m.Op, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, NewEncoder(&buf).Encode(m))
			require.Less(t, buf.Len(), len(data)+200, "raw, not base64")
			require.True(t, bytes.HasSuffix(buf.Bytes(), data))
			require.Equal(t, data, *m.bulk(false), "the sender's chunk keeps its data")
			var got Response
			require.NoError(t, NewDecoder(&buf).Decode(&got))
			require.Equal(t, m, got)
		})
	}
	var buf bytes.Buffer
	require.NoError(t, NewEncoder(&buf).Encode(Request{ID: 3, Op: OpEgress, Egress: &EgressFrame{Conn: 1, Data: data}}))
	require.Less(t, buf.Len(), len(data)+200)
	var got Request
	require.NoError(t, NewDecoder(&buf).Decode(&got))
	require.Equal(t, data, got.Egress.Data)
}

// BenchmarkArtifactFrames: a 32 MiB artifact in 256 KiB chunks, encoded and
// decoded; "json" is the same chunks with their data inside the JSON (as
// before the bulk bytes went raw), the baseline.
func BenchmarkArtifactFrames(b *testing.B) {
	data := make([]byte, 256<<10)
	chunk := Response{ID: 1, Op: OpArtifact, Artifact: &ArtifactChunk{Name: "near.bin", Data: data}}
	b.Run("raw", func(b *testing.B) {
		for range b.N {
			var buf bytes.Buffer
			enc, dec := NewEncoder(&buf), NewDecoder(&buf)
			for range 128 {
				require.NoError(b, enc.Encode(chunk))
				var r Response
				require.NoError(b, dec.Decode(&r))
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for range b.N {
			for range 128 {
				body, err := json.Marshal(chunk)
				require.NoError(b, err)
				var r Response
				require.NoError(b, json.Unmarshal(body, &r))
			}
		}
	})
}
