package natsx

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// fakeMsg is a fetched message: headers, subject and id are all processSpan reads.
type fakeMsg struct {
	jetstream.Msg
	h nats.Header
}

func (m fakeMsg) Headers() nats.Header { return m.h }
func (m fakeMsg) Subject() string      { return "usage.recorded.p-001" }

// published returns a message whose headers carry the context of a span
// started (and ended) under parent.
func published(t *testing.T, tr trace.Tracer, parent context.Context, id string) (jetstream.Msg, trace.SpanContext) {
	t.Helper()
	ctx, sp := tr.Start(parent, "publish "+id)
	defer sp.End()
	h := nats.Header{jetstream.MsgIDHeader: []string{id}}
	InjectTrace(ctx, h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no traceparent header injected: %v", h)
	}
	return fakeMsg{h: h}, sp.SpanContext()
}

// TestProcessSpanParentOrLinks holds the batch rule: the messages of one
// trace are processed in a child span of the first one's publish span (links
// to the others); messages of several traces in a new trace linked to each;
// messages with no trace context in a new trace without links.
func TestProcessSpanParentOrLinks(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// A no-op provider first and last: the first global provider set is
	// the one OpenTelemetry's default delegates to for good.
	otel.SetTracerProvider(noop.NewTracerProvider())
	prevProp := otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()); otel.SetTextMapPropagator(prevProp) })
	tr := tp.Tracer("test")
	spec := ConsumerSpec{Stream: StreamUsage, Durable: "pricing-rating"}

	// One trace, two messages.
	rootCtx, root := tr.Start(context.Background(), "ingest")
	m1, p1 := published(t, tr, rootCtx, "m1")
	m2, p2 := published(t, tr, rootCtx, "m2")
	root.End()
	_, sp := processSpan(context.Background(), spec, []jetstream.Msg{m1, m2})
	sp.End()
	got := sp.(sdktrace.ReadOnlySpan)
	if got.Parent().SpanID() != p1.SpanID() || got.SpanContext().TraceID() != p1.TraceID() {
		t.Errorf("one trace: parent %v in trace %v, want the publish span %v of trace %v", got.Parent().SpanID(), got.SpanContext().TraceID(), p1.SpanID(), p1.TraceID())
	}
	if l := got.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != p2.SpanID() {
		t.Errorf("one trace: links %v, want one to the second publish span %v", l, p2.SpanID())
	}
	if got.Name() != "process usage.recorded" || got.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("name %q kind %v", got.Name(), got.SpanKind())
	}

	// Two traces: a new root linked to both.
	_, q1 := published(t, tr, context.Background(), "n1")
	n1 := fakeMsg{h: nats.Header{jetstream.MsgIDHeader: []string{"n1"}}}
	InjectTrace(trace.ContextWithSpanContext(context.Background(), q1), n1.h)
	_, q2 := published(t, tr, context.Background(), "n2")
	n2 := fakeMsg{h: nats.Header{jetstream.MsgIDHeader: []string{"n2"}}}
	InjectTrace(trace.ContextWithSpanContext(context.Background(), q2), n2.h)
	if q1.TraceID() == q2.TraceID() {
		t.Fatal("the two publishes share a trace")
	}
	_, sp = processSpan(context.Background(), spec, []jetstream.Msg{n1, n2})
	sp.End()
	got = sp.(sdktrace.ReadOnlySpan)
	if got.Parent().IsValid() {
		t.Errorf("two traces: parent %v, want a new root", got.Parent())
	}
	if got.SpanContext().TraceID() == q1.TraceID() || got.SpanContext().TraceID() == q2.TraceID() {
		t.Errorf("two traces: processed in one of them")
	}
	if l := got.Links(); len(l) != 2 || l[0].SpanContext.SpanID() != q1.SpanID() || l[1].SpanContext.SpanID() != q2.SpanID() {
		t.Errorf("two traces: links %v, want one to each publish span", l)
	}

	// No trace context: a new root, no links.
	_, sp = processSpan(context.Background(), spec, []jetstream.Msg{fakeMsg{h: nats.Header{jetstream.MsgIDHeader: []string{"x"}}}})
	sp.End()
	got = sp.(sdktrace.ReadOnlySpan)
	if got.Parent().IsValid() || len(got.Links()) != 0 {
		t.Errorf("untraced: parent %v links %v", got.Parent(), got.Links())
	}
}

// BenchmarkProcessSpanUntraced is what tracing off costs a consumer: one
// batch of 256 messages without trace headers, the global provider no-op.
func BenchmarkProcessSpanUntraced(b *testing.B) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	msgs := make([]jetstream.Msg, 256)
	for i := range msgs {
		msgs[i] = fakeMsg{h: nats.Header{jetstream.MsgIDHeader: []string{"m"}}}
	}
	spec := ConsumerSpec{Stream: StreamUsage, Durable: "pricing-rating"}
	b.ReportAllocs()
	for b.Loop() {
		_, sp := processSpan(context.Background(), spec, msgs)
		sp.End()
	}
}
