package tracing

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// collector is an OTLP/HTTP trace receiver: it decodes each request with
// the generated OTLP types, as a collector does, and answers with respond
// (200 and an empty ExportTraceServiceResponse if respond is nil).
type collector struct {
	srv     *httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, n int)

	mu   sync.Mutex
	reqs []received
}

// received is one request the collector got.
type received struct {
	method, path string
	header       http.Header
	export       *coltracepb.ExportTraceServiceRequest
	err          error // reading or decoding the body
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), export: &coltracepb.ExportTraceServiceRequest{}}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			got.err = err
		}
		body = zr
	}
	if got.err == nil {
		data, err := io.ReadAll(body)
		if err == nil {
			err = proto.Unmarshal(data, got.export)
		}
		got.err = err
	}
	c.mu.Lock()
	n := len(c.reqs)
	c.reqs = append(c.reqs, got)
	c.mu.Unlock()
	if c.respond != nil {
		c.respond(w, r, n)
		return
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) received() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.reqs...)
}

// exporterBundle is an Exporter sending to a collector, with the waits
// before its retries recorded instead of slept.
type exporterBundle struct {
	coll *collector
	exp  *Exporter

	mu    sync.Mutex
	slept []time.Duration
}

func (b *exporterBundle) waits() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.slept...)
}

// setupExporter starts a collector answering with respond and an
// Exporter for it with cfg, its URL the collector's /v1/traces.
func setupExporter(t *testing.T, cfg ExporterConfig, respond func(w http.ResponseWriter, r *http.Request, n int)) *exporterBundle {
	t.Helper()
	b := &exporterBundle{coll: &collector{respond: respond}}
	b.coll.srv = httptest.NewServer(b.coll)
	t.Cleanup(b.coll.srv.Close)
	cfg.URL = b.coll.srv.URL + "/v1/traces"
	exp, err := NewExporter(cfg)
	require.NoError(t, err)
	exp.sleep = func(_ context.Context, d time.Duration) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.slept = append(b.slept, d)
		return nil
	}
	t.Cleanup(func() { _ = exp.Shutdown(context.Background()) })
	b.exp = exp
	return b
}

func spanContext(t *testing.T, tid, sid string, flags trace.TraceFlags, state string, remote bool) trace.SpanContext {
	t.Helper()
	cfg := trace.SpanContextConfig{TraceFlags: flags, Remote: remote}
	var err error
	cfg.TraceID, err = trace.TraceIDFromHex(tid)
	require.NoError(t, err)
	cfg.SpanID, err = trace.SpanIDFromHex(sid)
	require.NoError(t, err)
	cfg.TraceState, err = trace.ParseTraceState(state)
	require.NoError(t, err)
	return trace.NewSpanContext(cfg)
}

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	if len(s) == 32 {
		id, err := trace.TraceIDFromHex(s)
		require.NoError(t, err)
		return id[:]
	}
	id, err := trace.SpanIDFromHex(s)
	require.NoError(t, err)
	return id[:]
}

// The OTLP values the tests expect.
func anyStr(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}
func anyBool(v bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}
}
func anyInt(v int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}
}
func anyDouble(v float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}
}
func anyArray(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}
func anyMap(kvs ...*commonpb.KeyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs}}}
}
func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

// TestExporterEncodesEveryField: every field the exporter writes reaches
// a collector decoding with the generated OTLP types exactly: spans
// grouped by resource and scope in the order they come, ids, trace
// state, parent, flags, kinds, times, attributes of every type (zero
// values, nested slices and maps, a 20 kB string), events, links, status,
// dropped counts, resource and scope attributes and schema URLs.
func TestExporterEncodesEveryField(t *testing.T) {
	t.Parallel()
	b := setupExporter(t, ExporterConfig{}, nil)

	const (
		tid1, sid1, parent1 = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "1111111111111111"
		tid2, sid2          = "22222222222222222222222222222222", "2222222222222222"
		tid3, sid3          = "33333333333333333333333333333333", "3333333333333333"
	)
	res1 := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "sandq-worker"), attribute.Int64("process.pid", 42))
	res2 := resource.NewSchemaless(attribute.String("service.name", "other"))
	scopeA := instrumentation.Scope{Name: Name, Version: "v1.2.3", SchemaURL: "https://example.com/schema/a",
		Attributes: attribute.NewSet(attribute.Bool("scope.attr", true))}
	scopeB := instrumentation.Scope{Name: "example.com/lib"}
	start := time.Unix(1_700_000_000, 123_456_789)
	end := start.Add(1500*time.Millisecond + 7)
	long := strings.Repeat("x", 20_000)

	full := tracetest.SpanStub{
		Name:        "sandq.job",
		SpanContext: spanContext(t, tid1, sid1, trace.FlagsSampled, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", false),
		Parent:      spanContext(t, tid1, parent1, trace.FlagsSampled, "", true),
		SpanKind:    trace.SpanKindConsumer,
		StartTime:   start,
		EndTime:     end,
		Attributes: []attribute.KeyValue{
			attribute.Bool("b.true", true),
			attribute.Bool("b.false", false),
			attribute.Int64("i.neg", -7),
			attribute.Int64("i.zero", 0),
			attribute.Int64("i.max", math.MaxInt64),
			attribute.Float64("f", 3.25),
			attribute.Float64("f.zero", 0),
			attribute.String("s", "héllo"),
			attribute.String("s.empty", ""),
			attribute.String("s.long", long),
			attribute.BoolSlice("bs", []bool{true, false}),
			attribute.Int64Slice("is", []int64{1, -2, 300}),
			attribute.Float64Slice("fs", []float64{1.5, -2}),
			attribute.StringSlice("ss", []string{"a", "", "c"}),
			attribute.StringSlice("ss.empty", nil),
			attribute.ByteSlice("bytes", []byte{0, 1, 0xff}),
			attribute.Slice("mixed", attribute.StringValue("x"), attribute.Int64Value(2),
				attribute.SliceValue(attribute.BoolValue(true)), attribute.MapValue(attribute.String("k", "v"))),
			attribute.Map("map", attribute.String("a", "1"), attribute.Int64("b", 2),
				attribute.Map("inner", attribute.Bool("c", true))),
			{Key: "empty"},
		},
		Events: []sdktrace.Event{
			{Name: "retry", Time: start.Add(10 * time.Millisecond),
				Attributes: []attribute.KeyValue{attribute.Int64("attempt", 2), attribute.String("why", "x")}, DroppedAttributeCount: 1},
			{Name: "bare", Time: start.Add(20 * time.Millisecond)},
		},
		Links: []sdktrace.Link{
			{SpanContext: spanContext(t, tid2, sid2, trace.FlagsSampled, "k=v", true),
				Attributes: []attribute.KeyValue{attribute.String("link.kind", "follows")}, DroppedAttributeCount: 2},
			{SpanContext: spanContext(t, tid3, sid3, 0, "", false)},
		},
		Status:               sdktrace.Status{Code: codes.Error, Description: "boom"},
		DroppedAttributes:    3,
		DroppedEvents:        4,
		DroppedLinks:         5,
		Resource:             res1,
		InstrumentationScope: scopeA,
	}
	other := tracetest.SpanStub{
		Name:                 "other",
		SpanContext:          spanContext(t, tid2, sid2, trace.FlagsSampled, "", false),
		SpanKind:             trace.SpanKindInternal,
		StartTime:            start,
		EndTime:              end,
		Status:               sdktrace.Status{Code: codes.Ok},
		Resource:             res2,
		InstrumentationScope: scopeB,
	}
	stubs := tracetest.SpanStubs{full, other}
	kinds := []struct {
		kind trace.SpanKind
		want tracepb.Span_SpanKind
	}{
		{trace.SpanKindUnspecified, tracepb.Span_SPAN_KIND_UNSPECIFIED},
		{trace.SpanKindInternal, tracepb.Span_SPAN_KIND_INTERNAL},
		{trace.SpanKindServer, tracepb.Span_SPAN_KIND_SERVER},
		{trace.SpanKindClient, tracepb.Span_SPAN_KIND_CLIENT},
		{trace.SpanKindProducer, tracepb.Span_SPAN_KIND_PRODUCER},
		{trace.SpanKindConsumer, tracepb.Span_SPAN_KIND_CONSUMER},
	}
	var kindSpans []*tracepb.Span
	for i, k := range kinds {
		sid := "00000000000000a" + string(rune('0'+i))
		stubs = append(stubs, tracetest.SpanStub{
			Name:                 "kind",
			SpanContext:          spanContext(t, tid1, sid, trace.FlagsSampled, "", false),
			Parent:               spanContext(t, tid1, sid1, trace.FlagsSampled, "", false),
			SpanKind:             k.kind,
			StartTime:            start,
			EndTime:              end,
			Resource:             res1,
			InstrumentationScope: scopeB,
		})
		kindSpans = append(kindSpans, &tracepb.Span{
			TraceId: hexBytes(t, tid1), SpanId: hexBytes(t, sid), ParentSpanId: hexBytes(t, sid1),
			Name: "kind", Kind: k.want,
			StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
			Status: &tracepb.Status{}, Flags: 0x101,
		})
	}

	require.NoError(t, b.exp.ExportSpans(context.Background(), stubs.Snapshots()))

	want := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
				kv("process.pid", anyInt(42)), kv("service.name", anyStr("sandq-worker")),
			}},
			SchemaUrl: "https://opentelemetry.io/schemas/1.26.0",
			ScopeSpans: []*tracepb.ScopeSpans{
				{
					Scope: &commonpb.InstrumentationScope{Name: Name, Version: "v1.2.3",
						Attributes: []*commonpb.KeyValue{kv("scope.attr", anyBool(true))}},
					SchemaUrl: "https://example.com/schema/a",
					Spans: []*tracepb.Span{{
						TraceId:           hexBytes(t, tid1),
						SpanId:            hexBytes(t, sid1),
						TraceState:        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
						ParentSpanId:      hexBytes(t, parent1),
						Flags:             0x301, // sampled, the parent's remoteness known, remote
						Name:              "sandq.job",
						Kind:              tracepb.Span_SPAN_KIND_CONSUMER,
						StartTimeUnixNano: 1_700_000_000_123_456_789,
						EndTimeUnixNano:   1_700_000_001_623_456_796,
						Attributes: []*commonpb.KeyValue{
							kv("b.true", anyBool(true)),
							kv("b.false", anyBool(false)),
							kv("i.neg", anyInt(-7)),
							kv("i.zero", anyInt(0)),
							kv("i.max", anyInt(math.MaxInt64)),
							kv("f", anyDouble(3.25)),
							kv("f.zero", anyDouble(0)),
							kv("s", anyStr("héllo")),
							kv("s.empty", anyStr("")),
							kv("s.long", anyStr(long)),
							kv("bs", anyArray(anyBool(true), anyBool(false))),
							kv("is", anyArray(anyInt(1), anyInt(-2), anyInt(300))),
							kv("fs", anyArray(anyDouble(1.5), anyDouble(-2))),
							kv("ss", anyArray(anyStr("a"), anyStr(""), anyStr("c"))),
							kv("ss.empty", anyArray()),
							kv("bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 0xff}}}),
							kv("mixed", anyArray(anyStr("x"), anyInt(2), anyArray(anyBool(true)), anyMap(kv("k", anyStr("v"))))),
							kv("map", anyMap(kv("a", anyStr("1")), kv("b", anyInt(2)), kv("inner", anyMap(kv("c", anyBool(true)))))),
							kv("empty", &commonpb.AnyValue{}),
						},
						DroppedAttributesCount: 3,
						Events: []*tracepb.Span_Event{
							{Name: "retry", TimeUnixNano: 1_700_000_000_133_456_789,
								Attributes:             []*commonpb.KeyValue{kv("attempt", anyInt(2)), kv("why", anyStr("x"))},
								DroppedAttributesCount: 1},
							{Name: "bare", TimeUnixNano: 1_700_000_000_143_456_789},
						},
						DroppedEventsCount: 4,
						Links: []*tracepb.Span_Link{
							{TraceId: hexBytes(t, tid2), SpanId: hexBytes(t, sid2), TraceState: "k=v",
								Attributes:             []*commonpb.KeyValue{kv("link.kind", anyStr("follows"))},
								DroppedAttributesCount: 2, Flags: 0x301},
							{TraceId: hexBytes(t, tid3), SpanId: hexBytes(t, sid3), Flags: 0x100},
						},
						DroppedLinksCount: 5,
						Status:            &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "boom"},
					}},
				},
				{Scope: &commonpb.InstrumentationScope{Name: "example.com/lib"}, Spans: kindSpans},
			},
		},
		{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", anyStr("other"))}},
			ScopeSpans: []*tracepb.ScopeSpans{{
				Scope: &commonpb.InstrumentationScope{Name: "example.com/lib"},
				Spans: []*tracepb.Span{{
					TraceId: hexBytes(t, tid2), SpanId: hexBytes(t, sid2), Flags: 0x101,
					Name: "other", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
					StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
					Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK},
				}},
			}},
		},
	}}
	reqs := b.coll.received()
	require.Len(t, reqs, 1)
	require.NoError(t, reqs[0].err)
	if diff := cmp.Diff(want, reqs[0].export, protocmp.Transform()); diff != "" {
		t.Errorf("the collector's request (-want +got):\n%s", diff)
	}
}

// TestExporterRequest: a POST of application/x-protobuf to the URL, with
// the configured headers, gzip-compressed when asked; an empty batch
// sends nothing.
func TestExporterRequest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		gzip     bool
		encoding string
	}{
		{name: "plain"},
		{name: "gzip", gzip: true, encoding: "gzip"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupExporter(t, ExporterConfig{Gzip: tt.gzip,
				Headers: map[string]string{"Authorization": "Bearer k=1", "X-Tenant": "acme", "Content-Type": "text/plain"}}, nil)
			require.NoError(t, b.exp.ExportSpans(context.Background(), nil))
			require.Empty(t, b.coll.received())

			span := tracetest.SpanStub{Name: "one", SpanContext: spanContext(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1, "", false)}
			require.NoError(t, b.exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{span.Snapshot()}))
			reqs := b.coll.received()
			require.Len(t, reqs, 1)
			r := reqs[0]
			require.NoError(t, r.err)
			require.Equal(t, "POST", r.method)
			require.Equal(t, "/v1/traces", r.path)
			require.Equal(t, "application/x-protobuf", r.header.Get("Content-Type"), "a header cannot replace it")
			require.Equal(t, tt.encoding, r.header.Get("Content-Encoding"))
			require.Equal(t, "Bearer k=1", r.header.Get("Authorization"))
			require.Equal(t, "acme", r.header.Get("X-Tenant"))
			require.Equal(t, "one", r.export.ResourceSpans[0].ScopeSpans[0].Spans[0].Name)
		})
	}
}

// TestExporterRefused: an answer outside 2xx that is not worth a retry is
// an error with the status and the head of the body, sent once.
func TestExporterRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{name: "bad request", status: 400, body: "proto: cannot parse invalid wire-format data", want: `400 Bad Request: "proto: cannot parse invalid wire-format data"`},
		{name: "long body", status: 500, body: strings.Repeat("e", errorBodyBytes) + "TAIL", want: "500 Internal Server Error: \"" + strings.Repeat("e", errorBodyBytes) + `..."`},
		{name: "unauthorized", status: 401, want: `401 Unauthorized: ""`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupExporter(t, ExporterConfig{}, func(w http.ResponseWriter, _ *http.Request, _ int) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			err := b.exp.ExportSpans(context.Background(), oneSpan(t))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "TAIL")
			require.Len(t, b.coll.received(), 1)
			require.Empty(t, b.waits())
		})
	}
}

// TestExporterRetry: a 429, 502, 503 or 504 is retried once, after the
// Retry-After the collector asks for (bounded) or a second.
func TestExporterRetry(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for _, tt := range []struct {
		name       string
		statuses   []int // the answers in turn; 200 after them
		retryAfter string
		wantErr    string
		wantReqs   int
		wantWait   time.Duration
	}{
		{name: "503 then ok", statuses: []int{503}, retryAfter: "3", wantReqs: 2, wantWait: 3 * time.Second},
		{name: "429 without Retry-After", statuses: []int{429}, wantReqs: 2, wantWait: time.Second},
		{name: "502", statuses: []int{502}, wantReqs: 2, wantWait: time.Second},
		{name: "504", statuses: []int{504}, retryAfter: "0", wantReqs: 2, wantWait: 0},
		{name: "Retry-After bounded", statuses: []int{503}, retryAfter: "3600", wantReqs: 2, wantWait: maxRetryAfter},
		{name: "Retry-After a date", statuses: []int{503}, retryAfter: date, wantReqs: 2, wantWait: maxRetryAfter},
		{name: "twice", statuses: []int{503, 503}, wantReqs: 2, wantWait: time.Second,
			wantErr: "503 Service Unavailable: \"busy\" (retried after 1s: tracing: export: POST "},
		{name: "then refused", statuses: []int{503, 400}, wantReqs: 2, wantWait: time.Second, wantErr: "400 Bad Request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupExporter(t, ExporterConfig{}, func(w http.ResponseWriter, _ *http.Request, n int) {
				if n < len(tt.statuses) {
					if tt.retryAfter != "" {
						w.Header().Set("Retry-After", tt.retryAfter)
					}
					w.WriteHeader(tt.statuses[n])
					_, _ = io.WriteString(w, "busy")
				}
			})
			err := b.exp.ExportSpans(context.Background(), oneSpan(t))
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
			reqs := b.coll.received()
			require.Len(t, reqs, tt.wantReqs)
			for _, r := range reqs {
				require.NoError(t, r.err)
				require.Len(t, r.export.ResourceSpans, 1, "the retry sends the same spans")
			}
			waits := b.waits()
			require.Equal(t, []time.Duration{tt.wantWait}, waits)
		})
	}
}

// TestRetryAfterDelay: the wait a Retry-After asks for, exactly.
func TestRetryAfterDelay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		header string
		want   time.Duration
	}{
		{"", time.Second},
		{"7", 7 * time.Second},
		{"0", 0},
		{"-1", time.Second},
		{"soon", time.Second},
		{"99999999999999999", maxRetryAfter},
		{now.Add(12 * time.Second).Format(http.TimeFormat), 12 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		require.Equal(t, tt.want, retryAfterDelay(tt.header, now), "Retry-After: %q", tt.header)
	}
}

// TestExporterPartialSuccess: a 2xx answer that reports spans rejected is
// an error naming how many and why; one that reports nothing, or is not
// protobuf, is not.
func TestExporterPartialSuccess(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		contentType string
		resp        *coltracepb.ExportTraceServiceResponse
		body        string
		wantErr     string
	}{
		{name: "rejected", contentType: "application/x-protobuf",
			resp: &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{
				RejectedSpans: 2, ErrorMessage: "spans too old"}},
			wantErr: `the collector rejected 2 spans: "spans too old"`},
		{name: "message only", contentType: "application/x-protobuf",
			resp: &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{
				ErrorMessage: "deprecated attribute"}},
			wantErr: `the collector rejected 0 spans: "deprecated attribute"`},
		{name: "empty partial success", contentType: "application/x-protobuf",
			resp: &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{}}},
		{name: "json", contentType: "application/json", body: `{"partialSuccess":{"rejectedSpans":"2"}}`},
		{name: "malformed", contentType: "application/x-protobuf", body: "\x0a\x05ab", wantErr: "decode the collector's response"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupExporter(t, ExporterConfig{}, func(w http.ResponseWriter, _ *http.Request, _ int) {
				body := []byte(tt.body)
				if tt.resp != nil {
					var err error
					body, err = proto.Marshal(tt.resp)
					if err != nil {
						panic(err)
					}
				}
				w.Header().Set("Content-Type", tt.contentType)
				_, _ = w.Write(body)
			})
			err := b.exp.ExportSpans(context.Background(), oneSpan(t))
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
			require.Len(t, b.coll.received(), 1, "not retried")
		})
	}
}

// TestExporterTimeout: a collector that does not answer fails the export
// after the configured timeout, or when the caller's context is done,
// with that context's cause; Shutdown ends an export in flight.
func TestExporterTimeout(t *testing.T) {
	t.Parallel()
	// hang answers no request until its client is gone, and says on
	// arrived when one came.
	hang := func(arrived chan<- struct{}) func(w http.ResponseWriter, r *http.Request, _ int) {
		return func(_ http.ResponseWriter, r *http.Request, _ int) {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-r.Context().Done()
		}
	}

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		b := setupExporter(t, ExporterConfig{Timeout: 200 * time.Millisecond}, hang(nil))
		// A bound for the test, should the exporter's timeout not work.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		began := time.Now()
		err := b.exp.ExportSpans(ctx, oneSpan(t))
		took := time.Since(began)
		var nerr net.Error
		require.ErrorAs(t, err, &nerr)
		require.True(t, nerr.Timeout(), "%v", err)
		require.GreaterOrEqual(t, took, 200*time.Millisecond)
		require.Less(t, took, 5*time.Second)
	})

	t.Run("context", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		b := setupExporter(t, ExporterConfig{Timeout: time.Minute}, hang(arrived))
		stop := errors.New("the caller stops")
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() {
			<-arrived
			cancel(stop)
		}()
		require.ErrorIs(t, b.exp.ExportSpans(ctx, oneSpan(t)), stop)
	})

	t.Run("shutdown", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		b := setupExporter(t, ExporterConfig{Timeout: time.Minute}, hang(arrived))
		go func() {
			<-arrived
			_ = b.exp.Shutdown(context.Background())
		}()
		require.ErrorIs(t, b.exp.ExportSpans(context.Background(), oneSpan(t)), ErrShutdown)
		require.ErrorIs(t, b.exp.ExportSpans(context.Background(), oneSpan(t)), ErrShutdown)
		require.Len(t, b.coll.received(), 1, "nothing sent after Shutdown")
	})

	t.Run("no retry past the context", func(t *testing.T) {
		t.Parallel()
		b := setupExporter(t, ExporterConfig{}, func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(503)
		})
		b.exp.sleep = sleepCtx // the real wait, cut short by the deadline
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := b.exp.ExportSpans(ctx, oneSpan(t))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "503 Service Unavailable")
		require.Len(t, b.coll.received(), 1)
	})
}

// TestExporterConfig: a config the exporter cannot use is refused with a
// precise error.
func TestExporterConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  ExporterConfig
		want string
	}{
		{"no URL", ExporterConfig{}, "no URL"},
		{"scheme", ExporterConfig{URL: "grpc://c:4317"}, "want http:// or https://"},
		{"host", ExporterConfig{URL: "http:///v1/traces"}, "has no host"},
		{"timeout", ExporterConfig{URL: "http://c:4318/v1/traces", Timeout: -time.Second}, "timeout -1s is negative"},
		{"header", ExporterConfig{URL: "http://c:4318/v1/traces", Headers: map[string]string{"a b": "c"}}, `header name "a b"`},
	} {
		_, err := NewExporter(tt.cfg)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	e, err := NewExporter(ExporterConfig{URL: "https://c:4318/v1/traces"})
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, e.client.Timeout, "the default timeout")
}

// oneSpan is a batch of one span.
func oneSpan(t *testing.T) []sdktrace.ReadOnlySpan {
	s := tracetest.SpanStub{Name: "one", SpanContext: spanContext(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1, "", false)}
	return []sdktrace.ReadOnlySpan{s.Snapshot()}
}
