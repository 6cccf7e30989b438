package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// lineBundle is a bare SDK server on a LineTransport, fed and read
// through pipes as a client on stdio would.
type lineBundle struct {
	t     testing.TB
	queue chan string
	out   *bufio.Reader
	done  chan error
}

func newLineBundle(t testing.TB, maxBytes int) *lineBundle {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	b := &lineBundle{t: t, queue: make(chan string, 64), out: bufio.NewReaderSize(outR, 1<<20), done: make(chan error, 1)}
	go func() {
		for s := range b.queue {
			if _, err := io.WriteString(inW, s); err != nil {
				return
			}
		}
		inW.Close()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { b.done <- srv.Run(ctx, &LineTransport{Reader: inR, Writer: outW, MaxMessageBytes: maxBytes}) }()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		if b.queue != nil {
			close(b.queue)
		}
	})
	b.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	require.Contains(t, string(b.read().Result), "protocolVersion")
	b.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")
	return b
}

// reply is one answer line.
type reply struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// send queues s for the server's input: a writer goroutine feeds it in
// order while the test reads the answers (the pipes buffer nothing).
func (b *lineBundle) send(s string) { b.queue <- s }

func (b *lineBundle) read() reply {
	b.t.Helper()
	type lineErr struct {
		line string
		err  error
	}
	c := make(chan lineErr, 1)
	go func() { l, err := b.out.ReadString('\n'); c <- lineErr{l, err} }()
	select {
	case le := <-c:
		require.NoError(b.t, le.err, "the server ended: %v", b.ended())
		var r reply
		require.NoError(b.t, json.Unmarshal([]byte(le.line), &r), le.line)
		return r
	case <-time.After(10 * time.Second):
		b.t.Fatalf("no answer")
	}
	return reply{}
}

// ended is the server's end, or nil while it runs.
func (b *lineBundle) ended() error {
	select {
	case err := <-b.done:
		return fmt.Errorf("run: %v", err)
	default:
		return nil
	}
}

// ping sends a ping with id and requires its answer: the server reads on.
func (b *lineBundle) ping(id string) {
	b.t.Helper()
	b.send(`{"jsonrpc":"2.0","id":"` + id + `","method":"ping"}` + "\n")
	for {
		r := b.read()
		if r.ID == id {
			require.Nil(b.t, r.Error)
			require.JSONEq(b.t, `{}`, string(r.Result))
			return
		}
	}
}

// TestLineTransport: every line a client can send gets an answer, and the
// next message is served; a line at the cap is served, one byte more is
// refused with the cap named; the end of the input ends the session
// without an error.
func TestLineTransport(t *testing.T) {
	t.Parallel()
	const limit = 1024
	b := newLineBundle(t, limit)

	type want struct {
		ID   any
		Code int64
		Msg  string
	}
	pad := func(id int, n int) string { // a valid ping of n bytes
		s := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"`, id)
		return s + strings.Repeat(" ", n-len(s)-1) + "}"
	}
	for _, tt := range []struct {
		name string
		line string
		want want
	}{
		{"not JSON", "not json", want{nil, -32700, "parse error: invalid character"}},
		{"garbage bytes", "\x00\xff\xfe\x01\x7f", want{nil, -32700, "parse error"}},
		{"truncated JSON", `{"jsonrpc":"2.0","id":1,"method":`, want{nil, -32700, "parse error"}},
		{"two values", `{"jsonrpc":"2.0","id":1,"method":"ping"} {}`, want{nil, -32700, "parse error"}},
		{"JSON-RPC 1.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, want{1.0, -32600, `version tag "1.0"`}},
		{"no version", `{"id":"a","method":"ping"}`, want{"a", -32600, "invalid request"}},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, want{nil, -32600, "an id is a string or an integer"}},
		{"fraction id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, want{nil, -32600, "an id is a string or an integer"}},
		{"id past 2^53", `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, want{nil, -32600, "at most 2^53"}},
		{"id past 64 bits", `{"jsonrpc":"2.0","id":-99999999999999999999999,"method":"ping"}`, want{nil, -32600, "at most 2^53"}},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, want{nil, -32600, "an id is a string or an integer"}},
		{"id at 2^53", `{"jsonrpc":"2.0","id":9007199254740992,"method":"no/such"}`, want{9007199254740992.0, -32601, "method not found"}},
		{"method not a string", `{"jsonrpc":"2.0","id":2,"method":5}`, want{2.0, -32600, "invalid request"}},
		{"response without id", `{"jsonrpc":"2.0","result":{}}`, want{nil, -32600, "invalid request"}},
		{"scalar", `42`, want{nil, -32600, "a message is a JSON object"}},
		{"null", `null`, want{nil, -32600, "a message is a JSON object"}},
		{"empty batch", `[]`, want{nil, -32600, "batches"}},
		{"batch", `[{"jsonrpc":"2.0","id":3,"method":"ping"}]`, want{nil, -32600, "batches"}},
		{"deep nesting", `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + "}}",
			want{9.0, -32600, "invalid request"}},
		{"unknown method", `{"jsonrpc":"2.0","id":4,"method":"no/such"}`, want{4.0, -32601, "method not found"}},
		{"bad params", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"x"}`, want{5.0, -32602, "invalid params"}},
		{"one byte past the cap", pad(6, limit+1), want{6.0, -32600, "the message is 1026 bytes; the cap is 1024 bytes"}},
		{"past the cap, id later", `{"jsonrpc":"2.0","method":"ping","params":{"x":"` + strings.Repeat("x", 8<<10) + `"},"id":7}`,
			want{nil, -32600, "the cap is 1024 bytes"}},
		{"far past the cap", `{"id":"big","jsonrpc":"2.0","method":"ping","params":{"x":"` + strings.Repeat("x", 3<<20) + `"}}`,
			want{"big", -32600, "the cap is 1024 bytes"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b.t = t
			b.send(tt.line + "\n")
			r := b.read()
			require.NotNil(t, r.Error, "an error answer: %+v", r)
			if diff := cmp.Diff(tt.want.ID, r.ID); diff != "" {
				t.Errorf("id (-want +got):\n%s", diff)
			}
			require.Equal(t, tt.want.Code, r.Error.Code, r.Error.Message)
			require.Contains(t, r.Error.Message, tt.want.Msg)
			b.ping("after " + tt.name)
		})
	}
	b.t = t

	t.Run("at the cap", func(t *testing.T) {
		b.t = t
		b.send(pad(8, limit) + "\r\n")
		r := b.read()
		require.Nil(t, r.Error, "a message of exactly the cap is served")
		require.Equal(t, 8.0, r.ID)
	})
	b.t = t
	t.Run("blank lines", func(t *testing.T) {
		b.t = t
		b.send("\n\r\n   \n")
		b.ping("after blank lines")
	})
	b.t = t

	close(b.queue) // the end of the input
	b.queue = nil
	select {
	case err := <-b.done:
		require.NoError(t, err, "the end of the input ends the session cleanly")
	case <-time.After(10 * time.Second):
		t.Fatal("the server does not end with its input")
	}
}

// failWriter fails every write after the first n.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("stdout is gone")
	}
	w.n--
	return len(p), nil
}

// TestLineTransportWriteFails: when an error answer cannot be written,
// the session ends with that error (the process exits non-zero), never
// lingers reading input it cannot answer.
func TestLineTransportWriteFails(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	in := strings.NewReader("garbage\n" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background(), &LineTransport{Reader: in, Writer: &failWriter{}}) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "stdout is gone")
	case <-time.After(10 * time.Second):
		t.Fatal("the server runs on without a writable output")
	}
}

// FuzzLineTransport: whatever bytes arrive, a ping sent after them is
// answered. `go test -fuzz FuzzLineTransport ./mcpserver` explores; the
// seeds run in every `go test`.
func FuzzLineTransport(f *testing.F) {
	for _, seed := range []string{"", "\n", "x", "{", "}", `{"jsonrpc":"2.0"}`, `{"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","id":{},"method":"ping"}`, `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":null}`, "[1,2", "\"\\u", "\xff\xfe\xfd", "\r\r\r",
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`} {
		f.Add([]byte(seed))
	}
	b := newLineBundle(f, 4096)
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		b.t = t
		n++
		b.send(string(data) + "\n")
		b.ping(fmt.Sprintf("probe-%d", n))
	})
}
