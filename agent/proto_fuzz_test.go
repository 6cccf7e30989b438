package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"testing"
)

// FuzzFrameDecoder: the framed protocol between worker and agent, read
// from a byte stream. The worker decodes Responses from a container that
// runs untrusted code; the agent decodes Requests. Each input is read as a
// stream of frames into both message types.
//   - The Decoder agrees with a reference reading of the framing (4-byte
//     big-endian length, then that many bytes of JSON): io.EOF at a clean
//     end, io.ErrUnexpectedEOF inside a header or a body, ErrFrameTooLarge
//     for a length past MaxFrame (TestDecoderFrameCap: without reading or
//     allocating the body), and for a whole frame exactly what
//     json.Unmarshal makes of its body, after which the next frame is still
//     aligned.
//   - A decoded message re-encodes (Encoder) to a frame whose header is
//     its body's length and whose body is the message's JSON; decoding and
//     re-encoding that frame gives the same bytes again, and a frame that
//     was already in that canonical form re-encodes to its own bytes.
func FuzzFrameDecoder(f *testing.F) {
	frame := func(body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(b, body...)
	}
	f.Add(frame(`{"id":1,"op":"run_result","run":{"steps":[{"name":"run","started":true,"exit_code":0,"wall_ns":5,"cpu_ns":1,"max_rss_kb":2,"stdout":{"head":"aGk=","total":2},"stderr":{"total":0},"rlimits":{}}]}}`))
	f.Add(frame(`{"id":2,"op":"run","run":{"files":[{"path":"../x","data":"eA=="}],"steps":[{"name":"run","argv":["python3","main.py"],"timeout":1000000000,"rlimits":{"nofile":256}}],"collect":{"globs":["**/*.csv"]}}}`))
	f.Add(frame(`{"id":3,"op":"artifact","artifact":{"index":0,"name":"../../etc/passwd","kind":"file","size":-1,"offset":-5,"data":"eA==","last":true}}`))
	f.Add(frame(`{"id":4,"op":"cell_result","cell":{"reply":{"a": [1, 2]},"stdout":{},"stderr":{},"wall_ns":0,"cpu_ns":0,"max_rss_kb":0}}`))
	f.Add(frame(`{"op":"file_done","files":[{"path":"a","size":1,"mode":420,"mod_time":"2024-01-02T03:04:05.5+01:00"}]}`))
	f.Add(frame(`{"id":18446744073709551615,"op":"egress","egress":{"conn":1,"open":true}}`))
	f.Add(frame("{\"op\":\"error\",\"error\":\"\xff\xfe\"}"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})                                // a 4 GiB frame
	f.Add([]byte{0x10, 0x00, 0x00, 0x01, '{'})                           // just past MaxFrame
	f.Add([]byte{0, 0, 0, 10, '{', '"'})                                 // truncated body
	f.Add([]byte{0, 0})                                                  // truncated header
	f.Add(frame(``))                                                     // empty body
	f.Add(append(frame(`{}`), frame(`not json`)...))                     // a good frame then a bad one
	f.Add(append(append(frame(`null`), frame(`[]`)...), frame(`{}`)...)) // null, wrong type, good
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFrames[Response](t, data)
		checkFrames[Request](t, data)
	})
}

// checkFrames decodes data as frames of T and checks each against the
// reference framing.
func checkFrames[T any](t *testing.T, data []byte) {
	t.Helper()
	d := NewDecoder(bytes.NewReader(data))
	rest := data
	for range 16 {
		var got T
		err := d.Decode(&got)
		// The reference.
		switch {
		case len(rest) == 0:
			if err != io.EOF {
				t.Fatalf("at the end of the stream: %v, want io.EOF", err)
			}
			return
		case len(rest) < 4:
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("in a %d-byte header: %v, want io.ErrUnexpectedEOF", len(rest), err)
			}
			return
		}
		n := binary.BigEndian.Uint32(rest)
		switch {
		case n > MaxFrame:
			if err != ErrFrameTooLarge {
				t.Fatalf("a %d-byte frame: %v, want ErrFrameTooLarge", n, err)
			}
			return
		case uint64(len(rest)-4) < uint64(n):
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("a %d-byte frame with %d bytes: %v, want io.ErrUnexpectedEOF", n, len(rest)-4, err)
			}
			return
		}
		body := rest[4 : 4+n]
		rest = rest[4+n:]
		var want T
		werr := json.Unmarshal(body, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("frame %q: Decode says %v, json.Unmarshal %v", body, err, werr)
		}
		if err != nil {
			continue // a bad body: the next frame is still aligned
		}
		canon, merr := json.Marshal(got)
		if merr != nil {
			t.Fatalf("marshal decoded %T: %v", got, merr)
		}
		if w, _ := json.Marshal(want); !bytes.Equal(canon, w) {
			t.Fatalf("frame %q: Decode made %s, json.Unmarshal %s", body, canon, w)
		}
		var buf bytes.Buffer
		if err := NewEncoder(&buf).Encode(got); err != nil {
			t.Fatalf("re-encode %s: %v", canon, err)
		}
		enc := buf.Bytes()
		if len(enc) < 4 || int(binary.BigEndian.Uint32(enc)) != len(enc)-4 || !bytes.Equal(enc[4:], canon) {
			t.Fatalf("Encode of %s wrote the frame %q", canon, enc)
		}
		if bytes.Equal(body, canon) && !bytes.Equal(enc, data[len(data)-len(rest)-4-len(body):len(data)-len(rest)]) {
			t.Fatalf("canonical frame %q re-encoded as %q", body, enc)
		}
		var back T
		if err := NewDecoder(bytes.NewReader(enc)).Decode(&back); err != nil {
			t.Fatalf("decode our own frame %q: %v", enc, err)
		}
		buf.Reset()
		if err := NewEncoder(&buf).Encode(back); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(buf.Bytes(), enc) {
			t.Fatalf("a frame did not survive decode and encode:\n%q\n%q", enc, buf.Bytes())
		}
	}
}

// TestDecoderFrameCap: a header announcing a frame past MaxFrame is
// refused from the header alone, without allocating the announced length
// and without reading further, however large the length.
func TestDecoderFrameCap(t *testing.T) {
	for _, n := range []uint32{MaxFrame + 1, 1 << 30, 0xffffffff} {
		hdr := binary.BigEndian.AppendUint32(nil, n)
		// A reader that fails past the header: the decoder must not try to
		// read the body.
		r := io.MultiReader(bytes.NewReader(hdr), errReader{})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var v any
		err := NewDecoder(r).Decode(&v)
		runtime.ReadMemStats(&after)
		if err != ErrFrameTooLarge {
			t.Fatalf("length %d: %v, want ErrFrameTooLarge", n, err)
		}
		// The decoder's own 64 KiB read buffer, and little else.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Fatalf("length %d: decoding allocated %d bytes", n, alloc)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("read past the header") }
