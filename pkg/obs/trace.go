package obs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the spans gpubill makes itself (the outbox relay, the
// JetStream consumers, the use cases); gRPC and Temporal spans carry their
// instrumentation's names.
const TracerName = "github.com/gpubill/gpubill"

// tracingShutdownTimeout bounds the flush of buffered spans at exit (a
// collector that does not answer must not hold a stopping service).
const tracingShutdownTimeout = 5 * time.Second

// Tracer is gpubill's tracer from the global provider (a no-op one unless
// SetupTracing installed an exporter).
func Tracer() trace.Tracer { return otel.Tracer(TracerName) }

// SetupTracing installs the W3C trace-context propagator and, when the
// standard OpenTelemetry variables name a collector
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; see
// ExporterFromEnv), a tracer provider exporting there in batches. opts add
// span processors (tests record spans in memory) and also install the
// provider. With neither, the global provider stays OpenTelemetry's no-op
// one: spans cost a few calls and nothing is recorded, and a trace context
// a caller sent is still carried through (gRPC metadata, outbox rows, NATS
// headers). The returned function flushes the buffered spans (at most
// tracingShutdownTimeout) and stops the provider; it is a no-op when none
// was installed.
func SetupTracing(ctx context.Context, service string, log *slog.Logger, opts ...sdktrace.TracerProviderOption) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	exp, err := ExporterFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	if exp == nil && len(opts) == 0 {
		return func(context.Context) error { return nil }, nil
	}
	res, err := serviceResource(service)
	if err != nil {
		return nil, err
	}
	all := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if exp != nil {
		all = append(all, sdktrace.WithBatcher(exp)) // OTEL_BSP_* tune it
	}
	tp := sdktrace.NewTracerProvider(append(all, opts...)...)
	if log != nil {
		// Export failures (collector down) are the SDK's to report; said
		// here rather than through the standard logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	}
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flush traces: %w", err)
		}
		return nil
	}, nil
}

// serviceResource names the process: service.name is the service's unless
// OTEL_SERVICE_NAME says otherwise; OTEL_RESOURCE_ATTRIBUTES adds to it.
func serviceResource(service string) (*resource.Resource, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, err
	}
	env, err := resource.New(context.Background(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return resource.Merge(res, env)
}

// ExporterFromEnv returns the OTLP span exporter the standard variables
// describe, or nil when tracing is off: neither OTEL_EXPORTER_OTLP_ENDPOINT
// nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER is
// "none". The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" (the default, port 4318) or
// "grpc" (port 4317). The exporters read the rest themselves (_HEADERS,
// _TIMEOUT, _COMPRESSION, _CERTIFICATE, _INSECURE, and their _TRACES_
// forms). Creating one does not connect: an unreachable collector costs
// dropped spans and a logged error per failed export, never a failed start.
func ExporterFromEnv(ctx context.Context) (sdktrace.SpanExporter, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	switch e := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: gpubill exports only otlp (or none)", e)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(proto) {
	case "", "http/protobuf":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP/HTTP trace exporter: %w", err)
		}
		return exp, nil
	case "grpc":
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP/gRPC trace exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", proto)
	}
}

// Traceparent returns the W3C traceparent of the span in ctx, or "" when
// there is none (tracing off and no caller's context): what an outbox row
// keeps so its relay continues the trace.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceparent returns ctx with the remote span context a traceparent
// names (ctx unchanged when tp is empty or malformed).
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// StartSpan starts an internal span of gpubill's tracer (a use case inside
// a traced call or batch); end it with EndSpan.
func StartSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name)
}

// EndSpan sets attrs on span, marks it failed when err is not nil, and ends it.
func EndSpan(span trace.Span, err error, attrs ...attribute.KeyValue) {
	if len(attrs) > 0 && span.IsRecording() {
		span.SetAttributes(attrs...)
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Int is an int span attribute (so callers need not import otel).
func Int(key string, v int) attribute.KeyValue { return attribute.Int(key, v) }
