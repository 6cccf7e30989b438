package worker

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/internal/tracing"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// jobTrace collects the spans of one attempt of a job while it runs, and
// records them when the attempt ends (end): the job's span, "sandq.job",
// a child of the producer's span the job carries (jobs.Job.TraceParent),
// from the job's enqueue to the attempt's end, and under it one span per
// phase, with the phase's own start and end. The scrub of the container,
// which runs after the job, is recorded when it ends, under the job's span.
//
// A nil *jobTrace records nothing: with no Config.TracerProvider the
// handler makes none, and a job costs no more than a nil check per phase.
//
// Spans carry IDs, names, counts, durations and statuses: never the job's
// code, stdin, arguments, environment, files, tags or output, nor a
// failure's reason (which can quote them).
type jobTrace struct {
	tracer trace.Tracer
	parent context.Context // carries the producer's span context, if any
	attrs  []attribute.KeyValue
	start  time.Time

	mu       sync.Mutex
	phases   []phaseRecord
	agent    phaseRecord // the agent round trip, for its steps
	status   jobs.Status
	ended    bool
	jobSpan  context.Context // the job's span, once ended
	enqueued time.Time
}

// phaseRecord is one span to record: its name without the "sandq."
// prefix; under is the phase it nests in ("" for the job).
type phaseRecord struct {
	name, under string
	start, end  time.Time
	attrs       []attribute.KeyValue
}

type jobTraceKey struct{}

// traceJob starts the trace of an attempt of job, when tracing is on.
func (h *Handler) traceJob(ctx context.Context, a attempt, job jobs.Job) (context.Context, *jobTrace) {
	if h.cfg.TracerProvider == nil {
		return ctx, nil
	}
	t := &jobTrace{
		tracer: h.cfg.TracerProvider.Tracer(tracing.Name),
		parent: tracing.Extract(context.WithoutCancel(ctx), job),
		start:  time.Now(),
		attrs: []attribute.KeyValue{
			attribute.String("sandq.job.id", job.ID), attribute.String("sandq.lang", job.Lang),
			attribute.String("sandq.queue", string(job.Queue)), attribute.String("sandq.tenant", job.Tenant),
			attribute.String("sandq.isolation", string(job.Isolation)), attribute.Int("sandq.attempt", a.retry+1),
			attribute.String("sandq.worker", h.cfg.Worker), attribute.Int("sandq.libraries", len(job.Libraries)),
			attribute.Int("sandq.tests", len(job.Tests)), attribute.Bool("sandq.network", job.Network != nil),
		},
	}
	return context.WithValue(ctx, jobTraceKey{}, t), t
}

// traceOf returns ctx's job trace, nil if none.
func traceOf(ctx context.Context) *jobTrace {
	t, _ := ctx.Value(jobTraceKey{}).(*jobTrace)
	return t
}

// phase records a phase of the job that ran from start to end.
func (t *jobTrace) phase(name string, start, end time.Time, attrs ...attribute.KeyValue) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := phaseRecord{name: name, start: start, end: end, attrs: attrs}
	switch {
	case t.ended && name == "scrub":
		t.record(t.jobSpan, r)
	case t.ended:
	case name == "agent":
		t.agent = r
	default:
		t.phases = append(t.phases, r)
	}
}

// queued records the job's wait in its queue, from its enqueue to the
// attempt taking it (the trace's start: the running Result's StartedAt
// is stamped a little later, in the start phase).
func (t *jobTrace) queued(enqueued time.Time) {
	if t == nil || enqueued.IsZero() || t.start.Before(enqueued) {
		return
	}
	t.mu.Lock()
	t.enqueued = enqueued
	t.mu.Unlock()
	t.phase("queue_wait", enqueued, t.start)
}

// steps records the steps of the agent round trip that returned out, one
// span each under the "agent" span, by their measured wall time from the
// round trip's start, then "collect": the rest of the round trip (the
// output files and plots collected, the output and artifacts sent back).
func (t *jobTrace) steps(out agent.RunResult) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agent
	if a.name == "" || t.ended {
		return
	}
	at := a.start
	for _, st := range out.Steps {
		end := at.Add(time.Duration(st.WallNs))
		if end.After(a.end) {
			end = a.end
		}
		t.phases = append(t.phases, phaseRecord{name: st.Name, under: "agent", start: at, end: end, attrs: []attribute.KeyValue{
			attribute.Bool("sandq.step.started", st.Started), attribute.Int("sandq.step.exit_code", st.ExitCode),
			attribute.Bool("sandq.step.timed_out", st.TimedOut), attribute.Bool("sandq.step.oom_killed", st.OOMKilled),
			attribute.Bool("sandq.step.prestarted", st.Prestarted), attribute.Int64("sandq.step.cpu_ms", st.CPUNs/1e6),
			attribute.Int64("sandq.step.max_rss_kb", st.MaxRSSKB),
		}})
		at = end
	}
	t.phases = append(t.phases, phaseRecord{name: "collect", under: "agent", start: at, end: a.end,
		attrs: []attribute.KeyValue{attribute.Int("sandq.artifacts", len(out.Artifacts)), attribute.Int("sandq.dropped", len(out.Dropped))}})
}

// result notes the job's final status (final).
func (t *jobTrace) result(status jobs.Status) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.status = status
	t.mu.Unlock()
}

// end records the attempt's spans; err is the attempt's error (a fault
// retried, a result that could not be stored).
func (t *jobTrace) end(err error) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	start := t.start
	if !t.enqueued.IsZero() {
		start = t.enqueued
	}
	ctx, span := t.tracer.Start(t.parent, "sandq.job", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(start), trace.WithAttributes(t.attrs...))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, "attempt failed: retried, or its result not stored")
	case t.status == jobs.StatusInternalError:
		span.SetStatus(codes.Error, string(t.status))
	}
	if t.status != "" {
		span.SetAttributes(attribute.String("sandq.status", string(t.status)))
	}
	t.jobSpan = ctx
	if t.agent.name != "" {
		t.phases = append(t.phases, t.agent)
	}
	under := map[string]context.Context{}
	for _, r := range t.phases {
		if r.under == "" {
			under[r.name] = t.record(ctx, r)
		}
	}
	for _, r := range t.phases {
		if p, ok := under[r.under]; ok && r.under != "" {
			t.record(p, r)
		}
	}
	t.phases = nil
	span.End(trace.WithTimestamp(now))
}

// record records r as a child of parent's span and returns its context.
func (t *jobTrace) record(parent context.Context, r phaseRecord) context.Context {
	ctx, span := t.tracer.Start(parent, "sandq."+r.name, trace.WithTimestamp(r.start), trace.WithAttributes(r.attrs...))
	span.End(trace.WithTimestamp(r.end))
	return ctx
}

// runOptions are the sandbox run options that report the pool's phases:
// to the metrics, and to ctx's trace.
func (h *Handler) runOptions(ctx context.Context) []sandbox.RunOption {
	t := traceOf(ctx)
	if t == nil {
		return []sandbox.RunOption{sandbox.WithPhases(h.observe)}
	}
	return []sandbox.RunOption{
		sandbox.WithPhases(func(name string, d time.Duration) {
			h.observe(name, d)
			now := time.Now()
			t.phase(name, now.Add(-d), now)
		}),
		sandbox.WithScrubbed(func(d time.Duration, kept bool) {
			now := time.Now()
			t.phase("scrub", now.Add(-d), now, attribute.Bool("sandq.container.kept", kept))
		}),
	}
}
