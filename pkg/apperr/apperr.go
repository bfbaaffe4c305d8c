// Package apperr holds the typed errors use cases return and maps them to
// gRPC status codes in one place (the port), so bad input is a 400 with
// field-level details, a conflicting replay a 409, and nothing is a 500 by
// accident.
package apperr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/reqid"
)

// Sentinel kinds; wrap them with fmt.Errorf("...: %w", apperr.ErrNotFound).
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")            // 409: idempotency key reused with another body, duplicate id
	ErrPrecondition = errors.New("failed precondition") // 400: state does not allow it
	ErrForbidden    = errors.New("permission denied")   // 403
	ErrUnavailable  = errors.New("unavailable")         // 503: a dependency is down, retry
)

// FieldViolation names one bad field.
type FieldViolation struct {
	Field  string
	Reason string
}

// InvalidError is bad input, with one entry per bad field.
type InvalidError struct{ Violations []FieldViolation }

func (e *InvalidError) Error() string {
	if len(e.Violations) == 1 {
		return fmt.Sprintf("invalid %s: %s", e.Violations[0].Field, e.Violations[0].Reason)
	}
	s := "invalid request:"
	for i, v := range e.Violations {
		if i > 0 {
			s += ";"
		}
		s += fmt.Sprintf(" %s: %s", v.Field, v.Reason)
	}
	return s
}

// Invalid returns an InvalidError for one field.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Violations: []FieldViolation{{Field: field, Reason: fmt.Sprintf(format, args...)}}}
}

// Earliest and latest instants a request's timestamp may name: those an
// RFC 3339 text (and PostgreSQL) can hold. A protobuf Timestamp over gRPC
// can carry years before 1 or after 9999: stored, it broke every later
// JSON answer holding it; queried, PostgreSQL refused it (a 500).
var (
	TimeMin = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	TimeMax = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// CheckTime is Invalid(field) for an instant outside TimeMin..TimeMax.
func CheckTime(field string, t time.Time) error {
	if t.Before(TimeMin) || t.After(TimeMax) {
		return Invalid(field, "outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z")
	}
	return nil
}

// Validator collects violations.
type Validator struct{ v []FieldViolation }

// Add records a violation.
func (v *Validator) Add(field, format string, args ...any) {
	v.v = append(v.v, FieldViolation{field, fmt.Sprintf(format, args...)})
}

// Check records a violation when ok is false.
func (v *Validator) Check(ok bool, field, format string, args ...any) {
	if !ok {
		v.Add(field, format, args...)
	}
}

// Len is the number of violations recorded.
func (v *Validator) Len() int { return len(v.v) }

// Err returns the collected violations as an error, or nil.
func (v *Validator) Err() error {
	if len(v.v) == 0 {
		return nil
	}
	return &InvalidError{Violations: v.v}
}

// Bounds on what an error echoes back: a reason quoting a megabyte of input
// would make a refusal cost as much as the request.
const (
	messageBytesMax   = 1024
	violationBytesMax = 256
)

// Clip shortens s to at most n bytes, on a rune boundary, marking the cut,
// and replaces invalid UTF-8 (a status message, or any string of an
// answer, must be valid UTF-8 to be marshalled at all: a reason quoting a
// client's bad byte made a 500).
func Clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// maskKeepChars is how many trailing characters Mask keeps.
const maskKeepChars = 4

// Mask is what an answer or a record shows of an account identifier or a
// secret (a payout method's account number, Alipay id or WeChat openid, a
// webhook's secret): its last maskKeepChars characters, "****0002"; one of
// at most maskKeepChars characters is all stars. Characters, not bytes: cut
// inside one, a webhook secret of Chinese characters was invalid UTF-8,
// which the answer's encoding refused (a 500), and an audit record would
// not marshal. The payout service answers with it and the audit log
// records with it, so the two agree.
func Mask(s string) string {
	r := []rune(s)
	if len(r) <= maskKeepChars {
		return strings.Repeat("*", len(r))
	}
	return "****" + string(r[len(r)-maskKeepChars:])
}

// ToStatus maps an error to a gRPC status error.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var inv *InvalidError
	switch {
	case errors.As(err, &inv):
		st := status.New(codes.InvalidArgument, Clip(err.Error(), messageBytesMax))
		br := &errdetails.BadRequest{}
		for _, v := range inv.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field: Clip(v.Field, violationBytesMax), Description: Clip(v.Reason, violationBytesMax)})
		}
		if withDetails, derr := st.WithDetails(br); derr == nil {
			st = withDetails
		}
		return st.Err()
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, Clip(err.Error(), messageBytesMax))
	case errors.Is(err, ErrConflict):
		return status.Error(codes.Aborted, Clip(err.Error(), messageBytesMax))
	case errors.Is(err, ErrPrecondition):
		return status.Error(codes.FailedPrecondition, Clip(err.Error(), messageBytesMax))
	case errors.Is(err, ErrForbidden):
		return status.Error(codes.PermissionDenied, Clip(err.Error(), messageBytesMax))
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, Clip(err.Error(), messageBytesMax))
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, Clip(err.Error(), messageBytesMax))
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, Clip(err.Error(), messageBytesMax))
	case Transient(err):
		// The database refusing connections (too many clients, failing
		// over, starting up) or a serialization conflict: the client's
		// request was fine and may be sent again (its idempotency key
		// answers the first outcome if it had one).
		return status.Error(codes.Unavailable, Clip(err.Error(), messageBytesMax))
	}
	return status.Error(codes.Internal, Clip(err.Error(), messageBytesMax))
}

// Downstream is an error another gpubill service's API answered this one
// (svc.DialInternal marks every call's): its gRPC status stays readable
// (status.Code, status.FromError) for this service's own decisions, and
// Public knows it is not the outside caller's. A downstream that refuses
// this service's credentials (Unauthenticated, PermissionDenied: a signing
// key or policy out of step between services) reached the caller as a 401
// or 403, as if their own token were wrong, with the peer's method and
// identity in its message; it is an internal error, logged.
type Downstream struct{ Err error }

func (d *Downstream) Error() string { return d.Err.Error() }

func (d *Downstream) Unwrap() error { return d.Err }

// GRPCStatus is the downstream's status as it answered.
func (d *Downstream) GRPCStatus() *status.Status {
	s, _ := status.FromError(d.Err)
	return s
}

// refusedDownstream reports whether err carries a downstream's refusal of
// this service's own credentials.
func refusedDownstream(err error) bool {
	var d *Downstream
	if !errors.As(err, &d) {
		return false
	}
	c := status.Code(d.Err)
	return c == codes.Unauthenticated || c == codes.PermissionDenied
}

// Messages a client sees instead of an internal error's detail (which may
// hold SQL, a table name or a peer's address): the detail goes to the log,
// under the request id the client gets. A request its deadline or its
// caller ended answers no detail either: the chain says what the service
// was doing when time ran out ("wallet r-1: timeout: context deadline
// exceeded").
var publicMessages = map[codes.Code]string{
	codes.Internal:         "internal error",
	codes.Unknown:          "internal error",
	codes.DataLoss:         "internal error",
	codes.Unavailable:      "a dependency is unavailable; retry later",
	codes.DeadlineExceeded: "deadline exceeded",
	codes.Canceled:         "request canceled",
}

// UnaryInterceptor maps handler errors to statuses. An internal,
// unavailable, deadline-exceeded or cancelled error is logged with its
// detail and the request id and answers only a generic message carrying
// that id (publicMessages); every error status carries the
// request id as an errdetails.RequestInfo.
func UnaryInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		return nil, Public(ctx, log, info.FullMethod, err)
	}
}

// Public maps err to the status a client may see (see UnaryInterceptor).
func Public(ctx context.Context, log *slog.Logger, method string, err error) error {
	id := reqid.From(ctx)
	s, _ := status.FromError(ToStatus(err))
	if refusedDownstream(err) {
		s = status.New(codes.Internal, s.Message())
	}
	if m := s.Message(); !utf8.ValidString(m) || len(m) > messageBytesMax {
		p := s.Proto()
		p.Message = Clip(m, messageBytesMax)
		s = status.FromProto(p)
	}
	if msg, ok := publicMessages[s.Code()]; ok {
		level := slog.LevelError
		if s.Code() == codes.DeadlineExceeded || s.Code() == codes.Canceled {
			level = slog.LevelWarn // the caller's deadline or its leaving: not a fault of the service
		}
		log.Log(ctx, level, "request failed", "request_id", id, "method", method, "code", s.Code().String(), "err", err)
		s = status.New(s.Code(), fmt.Sprintf("%s (request id %s)", msg, id))
	}
	if id == "" {
		return s.Err()
	}
	if withID, derr := s.WithDetails(&errdetails.RequestInfo{RequestId: id}); derr == nil {
		s = withID
	}
	return s.Err()
}
