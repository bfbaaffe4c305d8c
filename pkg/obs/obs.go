// Package obs sets up logging (log/slog) and OpenTelemetry for a process.
package obs

import (
	"io"
	"log/slog"
	"os"
	"strings"
)

// NewLogger returns a JSON slog logger at the given level ("debug".."error").
// A line logged with a context (log.InfoContext(ctx, …)) carries the
// request id and the trace and span ids found in it (ContextHandler).
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		l = slog.LevelInfo
	}
	if w == nil {
		w = os.Stderr
	}
	return slog.New(ContextHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
}
