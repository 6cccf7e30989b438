package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"path"
	"strings"
	"testing"
)

// FuzzMatchGlob: without "**", MatchGlob is path.Match segment by
// segment (same number of segments, each matching; path.Match on the
// whole would let "[/]" or "\\/" match a "/": testdata's f11a9b52ef4f6ce1
// and a6f04a5777119bc7); with "**", a match by the plain definition is a
// match too; "**" alone matches every name; a "*" never crosses a "/".
func FuzzMatchGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"*.png", "a.png"}, {"*.png", "d/a.png"}, {"**/*.png", "d/e/a.png"}, {"out/**", "out/a/b"},
		{"[a-", "a"}, {"\\", "x"}, {"**/**/**/**/**/**/a", strings.Repeat("x/", 50) + "a"}, {"a/*/c", "a/b/c"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		got := MatchGlob(pattern, name)
		if pattern == "**" && name != "" && !got {
			t.Fatalf("** does not match %q", name)
		}
		pat, segs := strings.Split(pattern, "/"), strings.Split(name, "/")
		want := len(pat) == len(segs)
		for i := 0; want && i < len(pat); i++ {
			ok, err := path.Match(pat[i], segs[i])
			want = err == nil && ok
		}
		if !strings.Contains(pattern, "**") && got != want {
			t.Fatalf("MatchGlob(%q, %q) = %v, path.Match segment by segment says %v", pattern, name, got, want)
		}
		if strings.Contains(pattern, "**") && want && !got {
			t.Fatalf("MatchGlob(%q, %q) = false, but it matches with ** as one segment", pattern, name)
		}
		_ = ValidGlob(pattern) // must not panic
	})
}

// FuzzFrameDecoder: the frame decoder never allocates past MaxFrame,
// never panics, and a frame it decodes re-encodes to one it decodes to
// the same value.
func FuzzFrameDecoder(f *testing.F) {
	frame := func(body string) []byte {
		var b bytes.Buffer
		_ = binary.Write(&b, binary.BigEndian, uint32(len(body)))
		b.WriteString(body)
		return b.Bytes()
	}
	f.Add(frame(`{"steps":[{"name":"run","exit_code":0}]}`))
	f.Add(frame(`{"op":"run"}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})            // a 4 GiB frame
	f.Add([]byte{0x10, 0x00, 0x00, 0x01, '{'})       // just past MaxFrame
	f.Add([]byte{0, 0, 0, 10, '{', '"'})             // truncated
	f.Add(append(frame(`{}`), frame(`not json`)...)) // a good frame then a bad one
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data))
		for range 8 {
			var v map[string]any
			err := d.Decode(&v)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrFrameTooLarge) {
				return
			}
			if err != nil {
				continue // bad JSON in a well-framed body: the next frame is still aligned
			}
			var buf bytes.Buffer
			if err := NewEncoder(&buf).Encode(v); err != nil {
				t.Fatalf("re-encode %v: %v", v, err)
			}
			var back map[string]any
			if err := NewDecoder(&buf).Decode(&back); err != nil {
				t.Fatalf("decode the re-encoded frame: %v", err)
			}
			a, _ := json.Marshal(v)
			b, _ := json.Marshal(back)
			if !bytes.Equal(a, b) {
				t.Fatalf("round trip changed the frame: %s -> %s", a, b)
			}
		}
	})
}
