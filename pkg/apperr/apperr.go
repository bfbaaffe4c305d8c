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

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// Err returns the collected violations as an error, or nil.
func (v *Validator) Err() error {
	if len(v.v) == 0 {
		return nil
	}
	return &InvalidError{Violations: v.v}
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
		st := status.New(codes.InvalidArgument, err.Error())
		br := &errdetails.BadRequest{}
		for _, v := range inv.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Reason})
		}
		if withDetails, derr := st.WithDetails(br); derr == nil {
			st = withDetails
		}
		return st.Err()
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrPrecondition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// UnaryInterceptor maps handler errors to statuses and logs internal ones.
func UnaryInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		st := ToStatus(err)
		if s, _ := status.FromError(st); s.Code() == codes.Internal || s.Code() == codes.Unknown {
			log.Error("internal error", "method", info.FullMethod, "err", err)
		}
		return nil, st
	}
}
