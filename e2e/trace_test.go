package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sandq/sandq/api"
	"github.com/sandq/sandq/jobs"
)

// otlpSpan is a span an OTLP receiver got, with its service's name.
type otlpSpan struct {
	service string
	*tracepb.Span
}

func (s otlpSpan) attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes
// each export (protobuf, gzip or not) and keeps the spans.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
	bad   []string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil && req.URL.Path == "/v1/traces" && req.Header.Get("Content-Type") == "application/x-protobuf" {
			err = proto.Unmarshal(data, &export)
		} else if err == nil {
			err = io.ErrUnexpectedEOF
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type")+": "+err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range export.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, otlpSpan{service: service, Span: s})
				}
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// trace returns the spans of trace id received so far.
func (r *otlpReceiver) trace(id []byte) []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []otlpSpan
	for _, s := range r.spans {
		if bytes.Equal(s.TraceId, id) {
			out = append(out, s)
		}
	}
	return out
}

// TestTraceAPIToSandbox: a job submitted through the API with a
// traceparent header makes one trace, received by an OTLP receiver from
// the API and the worker processes: the API's server span is a child of
// the caller's span, the enqueue a child of it, the worker's job span a
// child of the enqueue, and under it every phase of the job in its
// sandbox, down to the compile, run, collect and the container's scrub.
// No span carries the job's code, stdin or output.
func TestTraceAPIToSandbox(t *testing.T) {
	recv := startOTLPReceiver(t)
	// Both processes inherit these (t.Setenv: not parallel).
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	e := newEnv(t)
	dir := t.TempDir()
	w := e.startWorker("--concurrency", "1", "--artifact-dir", dir, "--artifact-prefix", e.prefix)
	w.waitLog("tracing: exporting spans", 5*time.Second)
	a := e.startAPI("--artifact-dir", dir)

	traceID, callerSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body, _ := json.Marshal(map[string]any{"lang": "c", "stdin": "STDIN-SECRET", "output_files": []string{"out.txt"},
		"code": `#include <stdio.h>
int main(void) { FILE *f = fopen("out.txt", "w"); fputs("x", f); fclose(f); puts("OUTPUT-SECRET"); return 0; } /* CODE-SECRET */`})
	req, err := http.NewRequest("POST", a.url+"/v1/jobs?wait=60s", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var v api.JobView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, jobs.StatusSucceeded, v.Status, v.Reason)
	require.Len(t, v.Artifacts, 1)

	want := []string{"POST /v1/jobs", "sandq.enqueue", "sandq.job", "sandq.queue_wait", "sandq.start", "sandq.plan",
		"sandq.acquire", "sandq.agent", "sandq.compile", "sandq.run", "sandq.collect", "sandq.upload", "sandq.store_result", "sandq.scrub"}
	tid, _ := hex.DecodeString(traceID)
	var spans map[string]otlpSpan
	missing := want
	for deadline := time.Now().Add(30 * time.Second); len(missing) > 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		spans, missing = map[string]otlpSpan{}, nil
		for _, s := range recv.trace(tid) {
			spans[s.Name] = s
		}
		for _, name := range want {
			if _, ok := spans[name]; !ok {
				missing = append(missing, name)
			}
		}
	}
	require.Empty(t, missing, "spans of the trace: %v; refused exports: %v", spanNames(spans), recv.bad)

	id := func(s otlpSpan) string { return hex.EncodeToString(s.SpanId) }
	parent := func(name string) string { return hex.EncodeToString(spans[name].ParentSpanId) }
	server := spans["POST /v1/jobs"]
	require.Equal(t, "sandq-api", server.service)
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, server.Kind)
	require.Equal(t, callerSpan, parent("POST /v1/jobs"), "the API's span is a child of the caller's")
	require.Equal(t, "/v1/jobs", server.attr("http.route"))
	require.Equal(t, id(server), parent("sandq.enqueue"), "the enqueue is a child of the API's span")
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, spans["sandq.enqueue"].Kind)
	job := spans["sandq.job"]
	require.Equal(t, "sandq-worker", job.service)
	require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, job.Kind)
	require.Equal(t, id(spans["sandq.enqueue"]), parent("sandq.job"), "the worker's job span is a child of the enqueue")
	require.Equal(t, "succeeded", job.attr("sandq.status"))
	for _, name := range []string{"sandq.queue_wait", "sandq.start", "sandq.plan", "sandq.acquire", "sandq.agent",
		"sandq.upload", "sandq.store_result", "sandq.scrub"} {
		require.Equal(t, id(job), parent(name), "%s is a child of the job's span", name)
		require.Equal(t, "sandq-worker", spans[name].service, name)
	}
	for _, name := range []string{"sandq.compile", "sandq.run", "sandq.collect"} {
		require.Equal(t, id(spans["sandq.agent"]), parent(name), "%s is a child of the agent's round trip", name)
	}
	// The phases follow each other in time.
	order := []string{"sandq.queue_wait", "sandq.start", "sandq.plan", "sandq.acquire", "sandq.agent", "sandq.upload", "sandq.store_result"}
	for i := 1; i < len(order); i++ {
		require.LessOrEqual(t, spans[order[i-1]].EndTimeUnixNano, spans[order[i]].StartTimeUnixNano+uint64(time.Millisecond),
			"%s ends before %s starts", order[i-1], order[i])
	}
	require.LessOrEqual(t, spans["sandq.compile"].EndTimeUnixNano, spans["sandq.run"].StartTimeUnixNano)
	require.LessOrEqual(t, job.StartTimeUnixNano, spans["sandq.queue_wait"].StartTimeUnixNano)
	require.GreaterOrEqual(t, job.EndTimeUnixNano, spans["sandq.store_result"].EndTimeUnixNano)

	for _, s := range recv.trace(tid) {
		raw, err := proto.Marshal(s.Span)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "SECRET", "span %s records the job's code, stdin or output", s.Name)
	}
}

func spanNames[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
