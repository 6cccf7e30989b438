// Package tracing is sandq's OpenTelemetry wiring: it turns OTLP trace
// export on from the standard environment variables (Setup), and carries
// W3C trace context between a context.Context and a job
// (jobs.Job.TraceParent, TraceState).
//
// Export is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and neither OTEL_SDK_DISABLED
// is "true" nor OTEL_TRACES_EXPORTER is "none"). Spans go out through
// sandq's own OTLP/HTTP exporter (Exporter), which writes the protobuf by
// hand: the SDK's otlptracehttp links the generated OTLP types and gRPC,
// whose initialisation alone costs the worker megabytes of resident
// memory. It reads OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY; the SDK
// reads OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*. Off, Setup does nothing at
// all: the global tracer provider stays OpenTelemetry's no-op one, no
// exporter, no goroutine.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandq/sandq/jobs"

	"github.com/rs/zerolog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of every sandq span.
const Name = "github.com/sandq/sandq"

// propagator reads and writes W3C traceparent and tracestate. It is used
// whether export is on or not: a producer with tracing off still passes
// its caller's trace context on to the job.
var propagator = propagation.TraceContext{}

// Enabled reports whether getenv (os.Getenv if nil) asks for OTLP trace
// export.
func Enabled(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup starts OTLP/HTTP trace export when the environment asks for it
// (Enabled), as the global tracer provider, with service as the
// service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name
// one. It returns the provider (nil when export is off) and a shutdown
// that flushes the spans not yet sent; call it before the process exits.
// Off, it returns a nil provider and a shutdown that does nothing.
func Setup(ctx context.Context, service string) (trace.TracerProvider, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	if !Enabled(nil) {
		return nil, noop, nil
	}
	cfg, err := exporterConfigFromEnv(os.Getenv, os.ReadFile)
	if err != nil {
		return nil, noop, err
	}
	exp, err := NewExporter(cfg)
	if err != nil {
		return nil, noop, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(),
		resource.WithFromEnv()) // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, noop, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	return tp, tp.Shutdown, nil
}

// Inject writes the trace context of ctx's span into j: nothing when ctx
// has no valid span context (j keeps what it has). A tracestate over
// jobs.MaxTraceStateBytes is left out.
func Inject(ctx context.Context, j *jobs.Job) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	j.TraceParent, j.TraceState = c["traceparent"], c["tracestate"]
	if len(j.TraceState) > jobs.MaxTraceStateBytes {
		j.TraceState = ""
	}
}

// Extract returns ctx with j's trace context as its remote parent span
// context; ctx unchanged when j has none, or an invalid one.
func Extract(ctx context.Context, j jobs.Job) context.Context {
	if j.TraceParent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": j.TraceParent, "tracestate": j.TraceState})
}

// ExtractHeaders returns ctx with the trace context of an incoming
// request's traceparent and tracestate headers as its remote parent.
func ExtractHeaders(ctx context.Context, h propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, h)
}

// Tracer is sandq's tracer of the global provider: the one Setup
// installs, a program's own (a Go producer that set one up), or the
// no-op one, which records nothing but keeps its parent's span context,
// so the context still reaches the job.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// Start is Setup for a command: a failure is logged and the process runs
// on without traces. stop flushes the spans not yet sent, for at most
// 5 s.
func Start(ctx context.Context, service string, log zerolog.Logger) (tp trace.TracerProvider, stop func()) {
	tp, shutdown, err := Setup(ctx, service)
	if err != nil {
		log.Error().Err(err).Msg("tracing is off")
		return nil, func() {}
	}
	if tp != nil {
		log.Info().Str("service", service).Msg("tracing: exporting spans over OTLP/HTTP")
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flush spans")
		}
	}
}

// ExtractEnv returns ctx with the trace context of the TRACEPARENT and
// TRACESTATE environment variables (as getenv reads them) as its remote
// parent: a command run from a traced script joins its trace.
func ExtractEnv(ctx context.Context, getenv func(string) string) context.Context {
	tp := getenv("TRACEPARENT")
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": getenv("TRACESTATE")})
}
