package obs

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/gpubill/gpubill/pkg/reqid"
)

// Log attribute names of the ids ContextHandler adds.
const (
	LogTraceID   = "trace_id"
	LogSpanID    = "span_id"
	LogRequestID = "request_id"
)

// ContextHandler adds to every record logged with a context the trace and
// span ids of the span in it (so a log line leads to its trace in the
// collector) and the request id (pkg/reqid), unless the record names one
// already.
type ContextHandler struct{ slog.Handler }

// Handle adds the ids, then hands the record on.
func (h ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
		}
		if id := reqid.From(ctx); id != "" && !hasAttr(r, LogRequestID) {
			r.AddAttrs(slog.String(LogRequestID, id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the ids' handler around the new one.
func (h ContextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ContextHandler{h.Handler.WithAttrs(as)}
}

// WithGroup keeps the ids' handler around the new one.
func (h ContextHandler) WithGroup(name string) slog.Handler {
	return ContextHandler{h.Handler.WithGroup(name)}
}

func hasAttr(r slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}
