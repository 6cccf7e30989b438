package api

import (
	"net/http"

	"github.com/sandq/sandq/internal/tracing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceRequest starts the request's server span, a child of the caller's
// traceparent header when it sends one. Health checks and metric scrapes
// get none. The span records the method, the operation's route and the
// status: never the query, a header or the body.
func traceRequest(r *http.Request) (*http.Request, func(info *requestInfo, code int)) {
	if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" {
		return r, func(*requestInfo, int) {}
	}
	ctx := tracing.ExtractHeaders(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := tracing.Tracer().Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method)))
	return r.WithContext(ctx), func(info *requestInfo, code int) {
		if span.IsRecording() {
			if info.route != "" {
				span.SetName(r.Method + " " + info.route)
				span.SetAttributes(attribute.String("http.route", info.route), attribute.String("sandq.operation", info.op))
			}
			span.SetAttributes(attribute.Int("http.response.status_code", code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
		}
		span.End()
	}
}
