package natsx

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpubill/gpubill/pkg/obs"
)

// Tracing across JetStream: a message's producer (the outbox relay) puts the
// W3C trace context of its publish span in the message's headers
// (traceparent, tracestate); Consume makes one span per fetched batch it
// hands to a handler, never one per event. A batch of one message, or of
// messages all from one trace, is processed in a child span of that publish
// span, so the trace goes on; a batch that merges messages of several traces
// is processed in a span of its own trace with a link to each message's
// publish span (OpenTelemetry's messaging conventions for batch
// processing): what it writes is traced from there.

// linksMax bounds the links of one batch span (the SDK keeps 128 by default).
const linksMax = 128

// headerCarrier reads and writes trace context in NATS headers under the
// W3C names as they are (lower case): NATS headers are case-sensitive.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// InjectTrace puts the trace context of ctx's span into h (nothing when
// ctx has none).
func InjectTrace(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() || h == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, headerCarrier(h))
}

// ExtractTrace returns ctx with the remote span context m's headers carry
// (ctx itself when they carry none).
func ExtractTrace(ctx context.Context, m jetstream.Msg) context.Context {
	h := m.Headers()
	if len(h["traceparent"]) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, headerCarrier(h))
}

// SpanName is "<operation> <domain>.<event>": the subject without its key,
// so names stay few (usage.recorded.p-001 → "publish usage.recorded").
func SpanName(subject, operation string) string {
	return operation + " " + subjectFamily(subject)
}

func subjectFamily(subject string) string {
	if i := strings.IndexByte(subject, '.'); i >= 0 {
		if j := strings.IndexByte(subject[i+1:], '.'); j >= 0 {
			return subject[:i+1+j]
		}
	}
	return subject
}

// SpanAttrs are a published message's attributes (messaging conventions).
func SpanAttrs(subject, id string, parts int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", subject),
		attribute.String("messaging.message.id", id),
		attribute.Int("messaging.batch.message_count", parts),
	}
}

// processSpan starts the span of a handler's run over msgs (see above).
func processSpan(ctx context.Context, spec ConsumerSpec, msgs []jetstream.Msg) (context.Context, trace.Span) {
	var parent trace.SpanContext
	var links []trace.Link
	oneTrace := true
	for _, m := range msgs {
		sc := trace.SpanContextFromContext(ExtractTrace(context.Background(), m))
		if !sc.IsValid() {
			continue
		}
		if !parent.IsValid() {
			parent = sc
		} else if sc.TraceID() != parent.TraceID() {
			oneTrace = false
		}
		if len(links) < linksMax {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				attribute.String("messaging.message.id", MsgID(m))}})
		}
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", spec.Stream),
			attribute.String("messaging.consumer.group.name", spec.Durable),
			attribute.Int("messaging.batch.message_count", len(msgs))),
	}
	switch {
	case parent.IsValid() && oneTrace:
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		if len(links) > 1 { // the other messages of that trace
			opts = append(opts, trace.WithLinks(links[1:]...))
		}
	case parent.IsValid():
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(links...))
	}
	name := "process " + spec.Stream
	if len(msgs) > 0 {
		name = SpanName(msgs[0].Subject(), "process")
	}
	return obs.Tracer().Start(ctx, name, opts...)
}
