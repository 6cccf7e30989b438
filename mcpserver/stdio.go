package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxMessageBytes is LineTransport's default cap on one message:
// the SDK's own (mcp.DefaultMaxLineLength), 16 MiB.
const DefaultMaxMessageBytes = mcp.DefaultMaxLineLength

// LineTransport is the stdio transport: newline-delimited JSON-RPC, as
// the SDK's IOTransport, except that no input line ends the session. The
// SDK's reader ends it on the first line it cannot decode (bad JSON, a
// "jsonrpc" other than "2.0", a line past its cap), so LineTransport reads
// the lines itself and hands the SDK only those it decodes; every other
// line gets a JSON-RPC error answer and the next line is read:
//
//   - not JSON: -32700 (parse error), id null;
//   - JSON but not a JSON-RPC 2.0 message (a "jsonrpc" other than
//     "2.0", an id that is neither a string nor an integer, a response
//     without an id, a scalar), or a batch (an array: MCP 2025-06-18
//     has none): -32600 (invalid request), with the message's id when it
//     has a valid one, else null;
//   - longer than MaxMessageBytes: -32600 naming the cap, with the id when
//     the message's first bytes name one. The line is skipped without
//     being held in memory.
//
// Blank lines are skipped. The session ends when Reader ends (io.EOF) or
// fails, or when an answer cannot be written.
type LineTransport struct {
	// Reader is the client's messages, one a line. Required.
	Reader io.Reader
	// Writer is where the answers go, one a line. Required. It is never
	// closed.
	Writer io.Writer
	// MaxMessageBytes caps one message, its line without the newline.
	// Default DefaultMaxMessageBytes (16 MiB).
	MaxMessageBytes int
}

var _ mcp.Transport = (*LineTransport)(nil)

// Connect implements mcp.Transport: it starts reading Reader.
func (t *LineTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	if t.Reader == nil || t.Writer == nil {
		return nil, errors.New("mcpserver: LineTransport needs Reader and Writer")
	}
	limit := t.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	w := &lockedWriter{w: t.Writer}
	pr, pw := io.Pipe()
	go filterLines(t.Reader, pw, w, limit)
	// The SDK reads only the lines filterLines passed, each within the
	// cap already.
	return (&mcp.IOTransport{Reader: pr, Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// lockedWriter serializes writes: the SDK's (one message a Write) and
// filterLines' error answers share the stream.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close leaves the stream open: it is the process's.
func (*lockedWriter) Close() error { return nil }

// idPrefixBytes is how much of an oversized line is kept to find its id.
const idPrefixBytes = 4 << 10

// filterLines reads r line by line, writes each valid message to sdk
// and answers each other line on w, until r ends, or sdk or w fails.
func filterLines(r io.Reader, sdk *io.PipeWriter, w io.Writer, limit int) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		line = line[:0]
		size, over := 0, false
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			size += len(chunk)
			switch {
			case over:
				// Past the cap: counted, not kept.
			case size > limit+2: // the newline, and a CR before it
				over = true
				keep := max(0, min(len(chunk), idPrefixBytes-len(line)))
				line = append(line, chunk[:keep]...)
			default:
				line = append(line, chunk...)
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			sdk.CloseWithError(fmt.Errorf("mcpserver: read stdin: %w", err))
			return
		}
		if size > 0 {
			var ans []byte
			if over || len(bytes.TrimRight(line, "\r\n")) > limit {
				ans = TooLarge(line, size, limit, "enqueue mcp --max-message-bytes")
			} else {
				msg := bytes.TrimRight(line, "\r\n")
				if ans = CheckMessage(msg); ans == nil && len(bytes.TrimSpace(msg)) > 0 {
					if _, werr := sdk.Write(append(msg, '\n')); werr != nil {
						return // the session ended
					}
				}
			}
			if ans != nil {
				if _, werr := w.Write(ans); werr != nil {
					sdk.CloseWithError(fmt.Errorf("mcpserver: answer an invalid message: %w", werr))
					return
				}
			}
		}
		if err != nil { // io.EOF
			sdk.Close()
			return
		}
	}
}

// CheckMessage returns the JSON-RPC error answer to msg (one line), or
// nil when the SDK can take it (or it is blank). Both doors use it: the
// stdio one per line, the HTTP one per request body.
func CheckMessage(msg []byte) []byte {
	if len(bytes.TrimSpace(msg)) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(msg, &v); err != nil {
		return answer(nil, jsonrpc.CodeParseError, "parse error: "+err.Error())
	}
	_, ok := v.(map[string]any)
	if !ok {
		if _, batch := v.([]any); batch {
			return answer(nil, jsonrpc.CodeInvalidRequest, "invalid request: batches (arrays of messages) are not supported")
		}
		return answer(nil, jsonrpc.CodeInvalidRequest, "invalid request: a message is a JSON object")
	}
	var head struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(msg, &head) // msg is a JSON object: cannot fail
	id, ok := rawID(head.ID)
	if !ok {
		// The SDK would read 1.5 as 1, 2^53+1 as 2^53 and 2^64 as
		// -2^63, and answer under an id the client never sent.
		return answer(nil, jsonrpc.CodeInvalidRequest, "invalid request: an id is a string or an integer of at most 2^53 in size")
	}
	if _, err := jsonrpc.DecodeMessage(msg); err != nil {
		return answer(id, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
	}
	return nil
}

// TooLarge is the answer to a message of size bytes past limit; prefix
// is its first bytes, where its id may be; flag names the cap's setting.
func TooLarge(prefix []byte, size, limit int, flag string) []byte {
	return answer(prefixID(prefix), jsonrpc.CodeInvalidRequest,
		fmt.Sprintf("invalid request: the message is %d bytes; the cap is %d bytes (%s)", size, limit, flag))
}

// prefixID is the top-level "id" of a JSON object cut short, when its
// first bytes hold a valid one.
func prefixID(prefix []byte) any {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil
		}
		if key == "id" {
			id, _ := rawID(val)
			return id
		}
	}
	return nil
}

// rawID is a message's id as written (raw): a string, an int64, or nil
// when it is absent or null. ok is false for any other id (a fraction, an
// integer past maxExactID, a bool, an object), which has no faithful
// answer.
func rawID(raw json.RawMessage) (id any, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil && n >= -maxExactID && n <= maxExactID {
		return n, true
	}
	return nil, false
}

// maxExactID bounds an integer id: the SDK reads ids as float64, exact
// up to 2^53.
const maxExactID = 1 << 53

// wireAnswer is a JSON-RPC error response.
type wireAnswer struct {
	JSONRPC string    `json:"jsonrpc"`
	ID      any       `json:"id"` // null when the message's is unknown
	Error   wireError `json:"error"`
}

type wireError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// answer is a JSON-RPC error response, one line.
func answer(id any, code int64, msg string) []byte {
	b, err := json.Marshal(wireAnswer{JSONRPC: "2.0", ID: id, Error: wireError{Code: code, Message: msg}})
	if err != nil { // unreachable: every field marshals
		panic(err)
	}
	return append(b, '\n')
}

// serverMethods are the requests an MCP server answers (the go-sdk's
// server method table, v1.8): a request for another is answered
// -32601 by UnknownMethod.
var serverMethods = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true, "tools/call": true,
	"prompts/list": true, "prompts/get": true, "resources/list": true, "resources/read": true,
	"resources/templates/list": true, "resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true, "logging/setLevel": true, "server/discover": true, "subscriptions/listen": true,
}

// UnknownMethod returns the JSON-RPC "method not found" answer to msg, a
// message CheckMessage passed, when it is a request for a method no MCP
// server answers (the SDK's HTTP handler refuses those in plain text);
// nil otherwise.
func UnknownMethod(msg []byte) []byte {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method == "" || serverMethods[m.Method] {
		return nil
	}
	id, ok := rawID(m.ID)
	if !ok || id == nil {
		return nil
	}
	return answer(id, jsonrpc.CodeMethodNotFound, fmt.Sprintf("method not found: %q", m.Method))
}
