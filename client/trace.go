package client

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// endEnqueueSpan ends the span of one enqueue ("sandq.enqueue"): the job's
// ID, queue and outcome, never its code, input or tags.
func endEnqueueSpan(span trace.Span, info EnqueueInfo, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("sandq.job.id", info.ID), attribute.String("sandq.queue", string(info.Queue)),
			attribute.Bool("sandq.existing", info.Existing))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// endBatchSpan ends the span of a batch enqueue ("sandq.enqueue_batch").
func endBatchSpan(span trace.Span, n int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("sandq.jobs", n))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
