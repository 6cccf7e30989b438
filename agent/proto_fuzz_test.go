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
//     big-endian length, then that many bytes of JSON; with bulkFlag in the
//     length, a second length and that many bulk bytes after the JSON):
//     io.EOF at a clean end, io.ErrUnexpectedEOF inside a header or a body,
//     ErrFrameTooLarge for lengths past MaxFrame (TestDecoderFrameCap:
//     without reading or allocating the body), and for a whole frame
//     exactly what json.Unmarshal makes of its body with the bulk bytes put
//     in the message's data field, or an error where they have no place,
//     after which the next frame is still aligned.
//   - A decoded message re-encodes (Encoder) to the frame the reference
//     makes of it (its JSON without its bulk bytes, then those); decoding
//     and re-encoding that frame gives the same bytes again, and a frame
//     that was already in that canonical form re-encodes to its own bytes.
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
	bulk := func(body, data string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(body))|bulkFlag)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		return append(append(b, body...), data...)
	}
	f.Add(bulk(`{"id":3,"op":"artifact","artifact":{"index":0,"name":"a","kind":"file","size":3,"offset":0,"last":true}}`, "\x00\xffx"))
	f.Add(bulk(`{"id":5,"op":"output","output":{"step":0,"stream":"stdout","data":null}}`, "hi\n"))
	f.Add(bulk(`{"id":6,"op":"egress","egress":{"conn":1,"data":"eA=="}}`, "y")) // data twice
	f.Add(bulk(`{"id":7,"op":"run_result","run":{}}`, "z"))                      // no place for it
	f.Add(bulk(`{"id":8,"op":"file","file":{"path":"a","data":null}}`, ""))      // empty bulk
	f.Add(append(bulk(`{"op":"live","live":{"step":0}}`, "ab"), frame(`{}`)...)) // then a plain frame
	f.Add([]byte{0x80, 0, 0, 2, '{', '}'})                                       // truncated bulk length
	f.Add([]byte{0x80, 0, 0, 2, 0x10, 0, 0, 0, '{', '}'})                        // bulk past MaxFrame
	f.Add([]byte{0x80, 0, 0, 2, 0, 0, 0, 9, '{', '}', 'a'})                      // truncated bulk
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
		hasBulk := n&bulkFlag != 0
		n &^= bulkFlag
		head := uint32(4)
		var m uint32
		if hasBulk && n <= MaxFrame {
			if len(rest) < 8 {
				if err != io.ErrUnexpectedEOF {
					t.Fatalf("in a bulk frame's %d-byte header: %v, want io.ErrUnexpectedEOF", len(rest), err)
				}
				return
			}
			head, m = 8, binary.BigEndian.Uint32(rest[4:])
		}
		switch {
		case n > MaxFrame || uint64(n)+uint64(m) > MaxFrame:
			if err != ErrFrameTooLarge {
				t.Fatalf("a frame of %d+%d bytes: %v, want ErrFrameTooLarge", n, m, err)
			}
			return
		case uint64(len(rest))-uint64(head) < uint64(n)+uint64(m):
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("a frame of %d+%d bytes with %d bytes: %v, want io.ErrUnexpectedEOF", n, m, len(rest)-int(head), err)
			}
			return
		}
		frameBytes := rest[:head+n+m]
		body, data := rest[head:head+n], rest[head+n:head+n+m]
		rest = rest[head+n+m:]
		var want T
		werr := json.Unmarshal(body, &want)
		if werr == nil && hasBulk {
			werr = putBulk(&want, data)
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("frame %q: Decode says %v, the reference %v", frameBytes, err, werr)
		}
		if err != nil {
			continue // a bad frame: the next frame is still aligned
		}
		canon := refFrame(t, got)
		if w := refFrame(t, want); !bytes.Equal(canon, w) {
			t.Fatalf("frame %q: Decode made %q, the reference %q", frameBytes, canon, w)
		}
		var buf bytes.Buffer
		if err := NewEncoder(&buf).Encode(got); err != nil {
			t.Fatalf("re-encode %q: %v", canon, err)
		}
		enc := buf.Bytes()
		if !bytes.Equal(enc, canon) {
			t.Fatalf("Encode wrote the frame %q, want %q", enc, canon)
		}
		if canonBody, _ := json.Marshal(withoutBulk(got)); bytes.Equal(body, canonBody) && !bytes.Equal(enc, frameBytes) {
			t.Fatalf("canonical frame %q re-encoded as %q", frameBytes, enc)
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

// putBulk is the reference's placing of a frame's bulk bytes in msg.
func putBulk(msg any, data []byte) error {
	b, ok := msg.(bulky)
	if !ok {
		return errors.New("not a message")
	}
	p := b.bulk(false)
	switch {
	case p == nil:
		return errors.New("no place")
	case len(*p) > 0:
		return errors.New("data twice")
	case len(data) == 0:
		return errors.New("empty")
	}
	*p = data
	return nil
}

// withoutBulk is msg without its bulk bytes (for a Request or Response).
func withoutBulk[T any](msg T) any {
	switch m := any(msg).(type) {
	case Response:
		r, _ := detachBulk(m)
		return r
	case Request:
		r, _ := detachBulk(m)
		return r
	}
	return msg
}

// refFrame is the reference encoding of msg: its JSON without its bulk
// bytes under a 4-byte length, and with bulk bytes, bulkFlag in the length,
// their own length and then them.
func refFrame[T any](t *testing.T, msg T) []byte {
	t.Helper()
	var data []byte
	if b, ok := any(&msg).(bulky); ok {
		if p := b.bulk(false); p != nil {
			data = *p
		}
	}
	body, err := json.Marshal(withoutBulk(msg))
	if err != nil {
		t.Fatalf("marshal %T: %v", msg, err)
	}
	if len(data) == 0 {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body))|bulkFlag)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(append(b, body...), data...)
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
