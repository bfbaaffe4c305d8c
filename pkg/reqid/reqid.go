// Package reqid carries the id of one API request: made at the edge (the
// REST listener, or the gRPC listener for a direct gRPC call), returned to
// the client in the X-Request-Id header and in every error body, and written
// with every log line about the request, so a client's report of a failure
// leads to its detail in the log.
package reqid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Header is the HTTP header (and, lower-cased, the gRPC metadata key) that
// carries the id.
const Header = "X-Request-Id"

// MetadataKey is Header as gRPC metadata spells it.
const MetadataKey = "x-request-id"

// lengthMax bounds an id accepted from a gRPC caller; longer or odd ones are
// replaced by a fresh id, so nothing a client sends reaches the log verbatim.
const lengthMax = 64

// New returns a fresh random id (32 hex digits).
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// Valid reports whether id is an acceptable request id: 1–64 characters of
// [A-Za-z0-9._-].
func Valid(id string) bool {
	if id == "" || len(id) > lengthMax {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

type ctxKey struct{}

// With stores id in ctx.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the request id in ctx, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}
