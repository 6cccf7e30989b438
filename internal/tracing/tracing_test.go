package tracing

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandq/sandq/jobs"
)

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		require.Equal(t, tt.want, Enabled(func(k string) string { return tt.env[k] }), "%v", tt.env)
	}
}

// TestInjectExtract: a job carries its producer's span context, round
// trip; with no span in the context a job keeps what it has; an
// oversized tracestate is dropped, not passed to be refused.
func TestInjectExtract(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := ExtractEnv(context.Background(), func(k string) string {
		return map[string]string{"TRACEPARENT": tp, "TRACESTATE": "congo=t61rcWkgMzE"}[k]
	})
	require.True(t, trace.SpanContextFromContext(ctx).IsRemote())
	var j jobs.Job
	Inject(ctx, &j)
	require.Equal(t, tp, j.TraceParent)
	require.Equal(t, "congo=t61rcWkgMzE", j.TraceState)
	sc := trace.SpanContextFromContext(Extract(context.Background(), j))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", sc.SpanID().String())

	mine := jobs.Job{TraceParent: "00-11111111111111111111111111111111-2222222222222222-01"}
	Inject(context.Background(), &mine)
	require.Equal(t, "00-11111111111111111111111111111111-2222222222222222-01", mine.TraceParent)

	var members []string
	for i := range 30 {
		members = append(members, "k"+string(rune('a'+i%26))+strings.Repeat("x", i)+"="+strings.Repeat("v", 20))
	}
	big := ExtractEnv(context.Background(), func(k string) string {
		return map[string]string{"TRACEPARENT": tp, "TRACESTATE": strings.Join(members, ",")}[k]
	})
	require.Greater(t, len(trace.SpanContextFromContext(big).TraceState().String()), jobs.MaxTraceStateBytes, "sanity: the context has it")
	var k jobs.Job
	Inject(big, &k)
	require.Equal(t, tp, k.TraceParent)
	require.Empty(t, k.TraceState)
	require.True(t, trace.SpanContextFromContext(Extract(context.Background(), jobs.Job{})).TraceID() == trace.TraceID{})
}
