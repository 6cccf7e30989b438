package jobs

// MaxTraceParentBytes caps [Job.TraceParent] (a version-00 traceparent is
// 55 bytes; later versions may append fields).
const MaxTraceParentBytes = 128

// MaxTraceStateBytes caps [Job.TraceState]: the 512 characters W3C Trace
// Context asks every participant to propagate. A producer drops a longer
// tracestate rather than have the job refused.
const MaxTraceStateBytes = 512

// validateTrace checks the trace context's size and characters only: its
// syntax is the tracer's business, and a malformed one starts a new trace
// instead of failing the job.
func validateTrace(j *Job) error {
	for _, f := range []struct {
		name, v string
		max     int
	}{{"traceparent", j.TraceParent, MaxTraceParentBytes}, {"tracestate", j.TraceState, MaxTraceStateBytes}} {
		if len(f.v) > f.max {
			return invalid(f.name, "is %d bytes; the cap is %d", len(f.v), f.max)
		}
		for i := 0; i < len(f.v); i++ {
			if c := f.v[i]; c < 0x20 || c > 0x7e {
				return invalid(f.name, "has a byte 0x%02x at %d; only printable ASCII is allowed", c, i)
			}
		}
	}
	return nil
}
