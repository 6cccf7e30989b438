package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// Server-Sent Events of one job (GET /v1/jobs/{id}/events):
//
//	event: status   data: {"status": "running"}          on each change
//	event: output   data: OutputEvent                    live output, id: the stream entry's ID
//	event: result   data: JobView                        the final Result, last
//
// Output events carry the Redis Stream entry's ID as their SSE id, so a
// client that reconnects with Last-Event-ID resumes after it. A job
// without live output gets its Result's output as output events once it
// has ended (without ids).

// StatusEvent is the data of a "status" event.
type StatusEvent struct {
	Status jobs.Status `json:"status"`
}

// OutputEvent is the data of an "output" event: a chunk of a step's
// stream.
type OutputEvent struct {
	Step   string `json:"step" doc:"compile or run"`
	Stream string `json:"stream" doc:"stdout or stderr"`
	Offset int64  `json:"offset" doc:"where data starts in the step's stream; a gap from the previous chunk's end was dropped"`
	// Data is the chunk: its bytes as text when they are UTF-8, else their
	// base64 (Encoding "base64").
	Data     string        `json:"data"`
	Encoding jobs.Encoding `json:"encoding,omitempty" enum:"base64" doc:"base64 when data is the base64 of bytes that are not UTF-8"`
	Dropped  int64         `json:"dropped,omitempty" doc:"bytes left out just before offset"`
	Limit    bool          `json:"limit,omitempty" doc:"the stream reached output_bytes: nothing more of it is streamed"`
	Attempt  int           `json:"attempt,omitempty"`
	FromEnd  bool          `json:"from_result,omitempty" doc:"made from the stored Result (the job had no live output)"`
}

var streamIDRE = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

func (s *Server) registerEvents() {
	op := huma.Operation{
		OperationID: "job-events", Method: http.MethodGet, Path: "/v1/jobs/{id}/events", Tags: []string{"jobs"},
		Summary: "Follow a job: status changes, live output, the final Result (Server-Sent Events)",
		Description: "A text/event-stream of `status` events (data: {\"status\"}), `output` events (data: OutputEvent; " +
			"id: the live output entry's ID, for Last-Event-ID) and a last `result` event (data: the job's view), then the " +
			"stream ends. A client reconnecting with Last-Event-ID gets the current status again and the output after that ID.",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429, 503},
		Responses: map[string]*huma.Response{"200": {
			Description: "Server-Sent Events",
			Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{
				Type: huma.TypeArray, Description: "SSE messages: event status (StatusEvent), output (OutputEvent), result (JobView)",
				Items: &huma.Schema{Extensions: map[string]any{"oneOf": []*huma.Schema{
					s.api.OpenAPI().Components.Schemas.Schema(reflectType[StatusEvent](), true, "StatusEvent"),
					s.api.OpenAPI().Components.Schemas.Schema(reflectType[OutputEvent](), true, "OutputEvent"),
					s.api.OpenAPI().Components.Schemas.Schema(reflectType[JobView](), true, "JobView"),
				}}},
			}}},
		}},
	}
	huma.Register(s.api, op, func(ctx context.Context, in *struct {
		JobIDParam
		LastEventID string `header:"Last-Event-ID" doc:"resume after this output event"`
	}) (*huma.StreamResponse, error) {
		after := ""
		if streamIDRE.MatchString(in.LastEventID) {
			after = in.LastEventID
		}
		f, err := s.svc.Follow(ctx, callerOf(ctx), in.ID, after)
		if err != nil {
			return nil, problem(err)
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			defer f.Close()
			s.events(hctx, f)
		}}, nil
	})
}

// keyRecheck is how often an event stream checks that its caller's API key
// still exists: a revoked key's open streams end within it.
const keyRecheck = 5 * time.Second

// whileKeyLive returns a context that ends with ctx, or once c's key is
// revoked (asked every keyRecheck; a failed read is not a revocation).
func (s *Server) whileKeyLive(ctx context.Context, c service.Caller) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if c.KeyHash == "" {
		return ctx, cancel
	}
	go func() {
		t := time.NewTicker(keyRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if live, err := s.svc.KeyLive(ctx, c); err == nil && !live {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}

// events writes a followed job's event stream until its result, with a
// keep-alive comment every 15 s; it ends early when its key is revoked.
func (s *Server) events(hctx huma.Context, f *service.Follow) {
	ctx, cancel := s.whileKeyLive(hctx.Context(), callerOf(hctx.Context()))
	defer cancel()
	hctx.SetHeader("Content-Type", "text/event-stream")
	hctx.SetHeader("Cache-Control", "no-cache")
	hctx.SetHeader("X-Accel-Buffering", "no")
	w := hctx.BodyWriter()
	sse := newSSE(w.(http.ResponseWriter))
	send := sse.send
	events := make(chan service.Event)
	go func() {
		defer close(events)
		for ev := range f.Events(ctx) {
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if !sse.keepAlive() {
				return
			}
		case ev, ok := <-events:
			if !ok {
				return // the reader failed (Redis): the client reconnects with Last-Event-ID
			}
			var sent bool
			switch {
			case ev.Output != nil:
				e := ev.Output
				out := OutputEvent{Step: e.Step, Stream: e.Stream, Offset: e.Offset, Dropped: e.Dropped, Limit: e.Limit,
					Attempt: e.Attempt, FromEnd: e.FromResult}
				out.Data, out.Encoding = jobs.EncodeOutput(e.Data)
				sent = send("output", e.ID, out)
			case ev.Result != nil:
				send("result", "", ev.Result)
				return
			default:
				sent = send("status", "", StatusEvent{Status: ev.Status})
			}
			if !sent {
				return
			}
		}
	}
}

// sseWriter writes server-sent events to a response, each write bounded by
// a 30 s deadline and flushed.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// send writes one event (with its id, when one is given); false once the
// client is gone.
func (s *sseWriter) send(event, id string, data any) bool {
	b, err := json.Marshal(data)
	if err != nil {
		return false
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if id != "" {
		fmt.Fprintf(s.w, "id: %s\n", id)
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// keepAlive writes a comment; false once the client is gone.
func (s *sseWriter) keepAlive() bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(s.w, ": keep-alive\n\n"); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}
