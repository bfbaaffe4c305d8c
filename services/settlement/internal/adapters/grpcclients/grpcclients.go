// Package grpcclients implements settlement's app.Ledger and app.Tax over
// the ledger's and the tax service's gRPC APIs (svc.Deps.Internal): the only
// place settlement converts to and from their protobuf messages.
package grpcclients

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// classify adds what failed to a gRPC error: bad input, a refusal or a
// conflict is app.Rejected (a conflict also app.Conflict); anything else
// (unavailable, deadline) is left to be retried.
func classify(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	switch status.Code(err) {
	case codes.Aborted, codes.AlreadyExists:
		return app.Conflict(err)
	case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.NotFound:
		return app.Rejected(err)
	}
	return err
}
