package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
)

func spanRecorder(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// byName indexes ended spans by name; a name twice fails the test.
func byName(t *testing.T, spans []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	m := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		require.NotContains(t, m, s.Name(), "span %s recorded twice", s.Name())
		m[s.Name()] = s
	}
	return m
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestTraceJob: an attempt's spans form one tree under the producer's span
// the job carries: the job's span, from its enqueue, and the phases the
// handler times itself under it; no span carries the job's code, stdin,
// environment, tags or output.
func TestTraceJob(t *testing.T) {
	t.Parallel()
	rec, tp := spanRecorder(t)
	b := setupHandler(t, func(c *Config) { c.TracerProvider = tp })
	b.sb.run = ran(step("run", func(s *agent.StepResult) { s.Stdout.Head = []byte("OUTPUT-SECRET") }))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	j := jobs.Job{ID: jobs.NewID(), Lang: "python", Code: "print('CODE-SECRET')", Stdin: "STDIN-SECRET",
		Env: map[string]string{"K": "ENV-SECRET"}, Tags: map[string]string{"t": "TAG-SECRET"}, TraceParent: parent}
	enqueued := time.Now().Add(-2 * time.Second).UTC()
	_, _, err := b.store.Put(context.Background(), jobs.Result{ID: j.ID, Status: jobs.StatusQueued, EnqueuedAt: enqueued})
	require.NoError(t, err)
	tk, a := task(t, j)
	require.NoError(t, b.h.process(context.Background(), a, tk))
	require.Equal(t, jobs.StatusSucceeded, b.result(t, j.ID).Status)

	spans := byName(t, rec.Ended())
	job, ok := spans["sandq.job"]
	require.True(t, ok, "no job span among %v", spans)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", job.SpanContext().TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", job.Parent().SpanID().String(), "the job's span is a child of the producer's")
	require.True(t, job.Parent().IsRemote())
	require.Equal(t, trace.SpanKindConsumer, job.SpanKind())
	require.Equal(t, "succeeded", attr(job, "sandq.status").AsString())
	require.Equal(t, j.ID, attr(job, "sandq.job.id").AsString())
	require.WithinDuration(t, enqueued, job.StartTime(), time.Millisecond, "the job's span starts at its enqueue")
	for _, name := range []string{"sandq.queue_wait", "sandq.start", "sandq.plan", "sandq.store_result"} {
		s, ok := spans[name]
		require.True(t, ok, "no %s span", name)
		require.Equal(t, job.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of the job's span", name)
		require.False(t, s.EndTime().Before(s.StartTime()), name)
	}
	require.WithinDuration(t, enqueued, spans["sandq.queue_wait"].StartTime(), time.Millisecond)
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), "SECRET", "span %s attribute %s", s.Name(), kv.Key)
		}
		require.NotContains(t, s.Status().Description, "SECRET")
	}
}

// TestTraceNoParent: a job without trace context starts a trace of its
// own; an invalid traceparent is ignored rather than failing the job.
func TestTraceNoParent(t *testing.T) {
	t.Parallel()
	for _, tp := range []string{"", "00-not-a-trace-parent"} {
		rec, prov := spanRecorder(t)
		b := setupHandler(t, func(c *Config) { c.TracerProvider = prov })
		b.sb.run = ran(step("run"))
		tk, a := task(t, jobs.Job{Lang: "python", Code: "x", TraceParent: tp})
		require.NoError(t, b.h.process(context.Background(), a, tk))
		job := byName(t, rec.Ended())["sandq.job"]
		require.NotNil(t, job, "traceparent %q", tp)
		require.False(t, job.Parent().IsValid(), "traceparent %q: a root span", tp)
		require.True(t, job.SpanContext().IsValid())
	}
}

// TestTraceSteps: the agent round trip's steps are laid out by their wall
// time under the agent's span, collect takes the rest; a scrub reported
// after the attempt ended is still recorded under the job's span, and
// other phases reported then are dropped.
func TestTraceSteps(t *testing.T) {
	t.Parallel()
	rec, tp := spanRecorder(t)
	h := &Handler{cfg: Config{TracerProvider: tp, Worker: "w"}}
	ctx, jt := h.traceJob(context.Background(), attempt{id: "j1"}, jobs.Job{ID: "j1", Lang: "c"})
	require.Same(t, jt, traceOf(ctx))
	t0 := time.Now()
	jt.phase("acquire", t0, t0.Add(10*time.Millisecond))
	jt.phase("agent", t0.Add(10*time.Millisecond), t0.Add(110*time.Millisecond))
	jt.steps(agent.RunResult{Steps: []agent.StepResult{
		{Name: "compile", Started: true, WallNs: int64(30 * time.Millisecond)},
		{Name: "run", Started: true, ExitCode: 3, WallNs: int64(50 * time.Millisecond), Stdout: agent.Output{Head: []byte("SECRET")}},
	}, Artifacts: []agent.Artifact{{Name: "a.png"}}})
	jt.result(jobs.StatusFailed)
	jt.end(nil)
	jt.phase("scrub", t0.Add(120*time.Millisecond), t0.Add(130*time.Millisecond), attribute.Bool("sandq.container.kept", true))
	jt.phase("upload", t0, t0) // too late: dropped
	jt.end(nil)                // once only

	spans := byName(t, rec.Ended())
	require.Len(t, spans, 7, "%v", spans)
	job, agentSpan := spans["sandq.job"], spans["sandq.agent"]
	for name, parent := range map[string]sdktrace.ReadOnlySpan{
		"sandq.acquire": job, "sandq.agent": job, "sandq.scrub": job,
		"sandq.compile": agentSpan, "sandq.run": agentSpan, "sandq.collect": agentSpan,
	} {
		require.Equal(t, parent.SpanContext().SpanID(), spans[name].Parent().SpanID(), name)
		require.Equal(t, job.SpanContext().TraceID(), spans[name].SpanContext().TraceID(), name)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for name, want := range map[string][2]time.Time{
		"sandq.compile": {at(10), at(40)}, "sandq.run": {at(40), at(90)}, "sandq.collect": {at(90), at(110)},
		"sandq.scrub": {at(120), at(130)},
	} {
		require.True(t, spans[name].StartTime().Equal(want[0]), "%s starts %v", name, spans[name].StartTime().Sub(t0))
		require.True(t, spans[name].EndTime().Equal(want[1]), "%s ends %v", name, spans[name].EndTime().Sub(t0))
	}
	require.Equal(t, int64(3), attr(spans["sandq.run"], "sandq.step.exit_code").AsInt64())
	require.Equal(t, int64(1), attr(spans["sandq.collect"], "sandq.artifacts").AsInt64())
	require.Equal(t, "failed", attr(job, "sandq.status").AsString())
}

// TestTraceOff: with no TracerProvider the handler makes no trace, and
// every recording call is a no-op on the nil trace.
func TestTraceOff(t *testing.T) {
	t.Parallel()
	h := &Handler{}
	ctx, jt := h.traceJob(context.Background(), attempt{}, jobs.Job{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	require.Nil(t, jt)
	require.Nil(t, traceOf(ctx))
	jt.phase("x", time.Now(), time.Now())
	jt.queued(time.Now())
	jt.steps(agent.RunResult{Steps: []agent.StepResult{{Name: "run"}}})
	jt.result(jobs.StatusSucceeded)
	jt.end(nil)
	require.Len(t, h.runOptions(ctx), 1, "only the metrics' phases")
}
