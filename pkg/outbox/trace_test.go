package outbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestRelayCarriesTraceContext: a row written inside a span keeps its
// traceparent; the relay publishes it in a producer span, child of that
// span, whose context is in the message's headers; the consumer processes
// it in a child of the producer span. A row written outside any span is
// published with no span and no header. (Not parallel: it sets the global
// tracer provider, restored at the end.)
func TestRelayCarriesTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	// A no-op provider first and last: the first global provider set is
	// the one OpenTelemetry's default delegates to for good.
	otel.SetTracerProvider(noop.NewTracerProvider())
	prevProp := otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()); otel.SetTextMapPropagator(prevProp) })

	ctx, pool, js := newOutboxDB(t, natsx.StreamUsage)
	wctx, write := tp.Tracer("test").Start(ctx, "ingest")
	if err := pg.InTx(wctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(wctx, tx, "t", outbox.Message{ID: "traced", Subject: "usage.recorded.p1", Payload: []byte("a")})
	}); err != nil {
		t.Fatal(err)
	}
	write.End()
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, "t", outbox.Message{ID: "untraced", Subject: "usage.recorded.p1", Payload: []byte("b")})
	}); err != nil {
		t.Fatal(err)
	}
	var stored []string
	rows, err := pool.Query(ctx, `select coalesce(traceparent, '') from t.outbox order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	if stored, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	want := "00-" + write.SpanContext().TraceID().String() + "-" + write.SpanContext().SpanID().String() + "-01"
	if len(stored) != 2 || stored[0] != want || stored[1] != "" {
		t.Fatalf("outbox traceparents %q, want [%q \"\"]", stored, want)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- (&outbox.Relay{Pool: pool, JS: js.JS, Schema: "t", Log: log}).Run(rctx) }()
	type got struct {
		header  string
		process trace.SpanContext
	}
	recv := make(chan got, 4)
	go func() {
		done <- natsx.Consume(rctx, js.JS, log, natsx.ConsumerSpec{Stream: natsx.StreamUsage, Durable: "c", BatchMax: 1,
			DeadLetters: deadletter.New(pool, "t", log)}, func(ctx context.Context, msgs []jetstream.Msg) error {
			recv <- got{msgs[0].Headers().Get("traceparent"), trace.SpanContextFromContext(ctx)}
			return nil
		})
	}()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("relay or consumer: %v", err)
			}
		}
	})
	var traced, untraced got
	select {
	case traced = <-recv:
	case <-time.After(10 * time.Second):
		t.Fatal("traced message not consumed")
	}
	select {
	case untraced = <-recv:
	case <-time.After(10 * time.Second):
		t.Fatal("untraced message not consumed")
	}
	if untraced.header != "" {
		t.Errorf("untraced row published with traceparent %q", untraced.header)
	}
	if traced.process.TraceID() != write.SpanContext().TraceID() {
		t.Fatalf("consumer span in trace %v (header %q), want the writer's %v", traced.process.TraceID(), traced.header, write.SpanContext().TraceID())
	}
	var publish sdktrace.ReadOnlySpan
	testkit.Eventually(t, 5*time.Second, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "publish usage.recorded" && s.SpanContext().TraceID() == write.SpanContext().TraceID() {
				publish = s
			}
		}
		return publish != nil
	}, "publish span ended")
	if publish.Parent().SpanID() != write.SpanContext().SpanID() || publish.SpanKind() != trace.SpanKindProducer {
		t.Errorf("publish span: parent %v kind %v, want the writer's span %v, producer", publish.Parent().SpanID(), publish.SpanKind(), write.SpanContext().SpanID())
	}
	if traced.header != "00-"+publish.SpanContext().TraceID().String()+"-"+publish.SpanContext().SpanID().String()+"-01" {
		t.Errorf("header traceparent %q is not the publish span %v", traced.header, publish.SpanContext().SpanID())
	}
	for _, s := range rec.Ended() {
		if s.Name() == "process usage.recorded" && s.SpanContext().SpanID() == traced.process.SpanID() && s.Parent().SpanID() != publish.SpanContext().SpanID() {
			t.Errorf("process span's parent %v, want the publish span %v", s.Parent().SpanID(), publish.SpanContext().SpanID())
		}
	}
}
