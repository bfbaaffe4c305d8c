package obs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/reqid"
)

// collector is a fake OTLP receiver (HTTP and gRPC): the spans and the
// authorization header it was sent.
type collector struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []string // "<service.name>/<span name>"
	auth  []string
}

func (c *collector) take(req *coltrace.ExportTraceServiceRequest, auth string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auth = append(c.auth, auth)
	for _, rs := range req.ResourceSpans {
		svc := ""
		for _, a := range rs.Resource.Attributes {
			if a.Key == "service.name" {
				svc = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, svc+"/"+s.Name)
			}
		}
	}
}

func (c *collector) Export(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.take(req, strings.Join(md.Get("authorization"), ","))
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.take(&req, r.Header.Get("Authorization"))
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, err := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(out)
}

// TestTracingOffWhenUnset: without OTEL_EXPORTER_OTLP_*, SetupTracing leaves
// the global tracer provider alone (no-op: nothing recorded).
func TestTracingOffWhenUnset(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	before := noop.NewTracerProvider()
	otel.SetTracerProvider(before)
	shutdown, err := obs.SetupTracing(context.Background(), "ledger", nil)
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("a tracer provider was installed with no exporter configured")
	}
	_, sp := obs.Tracer().Start(context.Background(), "x")
	if sp.IsRecording() || sp.SpanContext().IsValid() {
		t.Fatal("a span is recorded with tracing off")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// OTEL_TRACES_EXPORTER=none turns it off with an endpoint set.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if _, err := obs.SetupTracing(context.Background(), "ledger", nil); err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("a tracer provider was installed with OTEL_TRACES_EXPORTER=none")
	}
}

// TestExportToCollector: the standard variables point the exporter at a
// collector over OTLP/HTTP (the default) or gRPC, with its headers; the
// shutdown flushes what was buffered.
func TestExportToCollector(t *testing.T) {
	for _, protocol := range []string{"", "http/protobuf", "grpc"} {
		t.Run("protocol="+protocol, func(t *testing.T) {
			// OTEL_SERVICE_NAME names the process over the service's name.
			service, want := "metering", "metering/ingest usage"
			if protocol == "http/protobuf" {
				t.Setenv("OTEL_SERVICE_NAME", "metering-eu")
				want = "metering-eu/ingest usage"
			}
			c := &collector{}
			var endpoint string
			if protocol == "grpc" {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				coltrace.RegisterTraceServiceServer(gs, c)
				go gs.Serve(l) //nolint:errcheck // stopped below
				t.Cleanup(gs.Stop)
				endpoint = "http://" + l.Addr().String()
			} else {
				srv := httptest.NewServer(c)
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer collector-token")
			otel.SetTracerProvider(noop.NewTracerProvider()) // the default's delegate for good, if first
			t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
			shutdown, err := obs.SetupTracing(context.Background(), service, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, sp := obs.Tracer().Start(context.Background(), "ingest usage")
			sp.End()
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.spans) != 1 || c.spans[0] != want || c.auth[0] != "Bearer collector-token" {
				t.Fatalf("collector got spans %q with authorization %q", c.spans, c.auth)
			}
		})
	}
	t.Run("bad protocol", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
		if _, err := obs.SetupTracing(context.Background(), "metering", nil); err == nil {
			t.Fatal("http/json accepted; the Go exporter does not speak it")
		}
	})
}

// TestLogsCarryTraceAndRequestIDs: a line logged with a context names its
// trace, span and request; one that names its request id already keeps it.
func TestLogsCarryTraceAndRequestIDs(t *testing.T) {
	var buf bytes.Buffer
	log := obs.NewLogger(&buf, "info").With("service", "ledger")
	ctx := obs.WithTraceparent(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx = reqid.With(ctx, "req-1")
	log.InfoContext(ctx, "posted")
	log.ErrorContext(ctx, "request failed", "request_id", "req-1")
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines: %q", lines)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || first["span_id"] != "00f067aa0ba902b7" || first["request_id"] != "req-1" || first["service"] != "ledger" {
		t.Errorf("line with context: %s", lines[0])
	}
	if strings.Count(lines[1], `"request_id"`) != 1 {
		t.Errorf("request id twice: %s", lines[1])
	}
	if strings.Contains(lines[2], "trace_id") || strings.Contains(lines[2], "request_id") {
		t.Errorf("line without context: %s", lines[2])
	}
	if got := obs.Traceparent(ctx); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("Traceparent round trip: %q", got)
	}
	if got := obs.Traceparent(context.Background()); got != "" {
		t.Errorf("Traceparent of no span: %q", got)
	}
}
