// Package grpcclients implements settlement's app.Ledger and app.Tax over
// the ledger's and the tax service's gRPC APIs (svc.Deps.Internal): the only
// place settlement converts to and from their protobuf messages.
package grpcclients

import (
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// classify adds what failed to a gRPC error: bad input, a refusal or a
// conflict is app.Rejected under its gRPC code (app.RefusalCode; a
// conflict also app.Conflict, the ledger's refusal to overdraw bank:client
// also app.Unfunded); anything else (unavailable, deadline) is left to be
// retried.
func classify(what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	switch code := status.Code(err); code {
	case codes.Aborted, codes.AlreadyExists:
		return app.Conflict(err)
	case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.NotFound:
		if bankClientShort(err) {
			return app.Unfunded(err)
		}
		return app.RejectedAs(code.String(), err)
	}
	return err
}

// bankClientOverdraft is how the ledger words its refusal to take
// bank:client below zero (services/ledger/internal/app checkOverdraft): a
// BadRequest field violation on postings whose description starts so.
// The same field carries other violations (other accounts overdrawn, a
// posting's shape), so the account is read from the description.
const bankClientOverdraft = "bank:client would go negative in "

// bankClientShort tells whether err is the ledger's refusal of a
// transaction because bank:client cannot fund it: InvalidArgument whose
// every field violation is bank:client's overdraft on postings. Anything
// else (another field, another account, a code other than
// InvalidArgument, no violations at all) is not.
func bankClientShort(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return false
	}
	n := 0
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			if v.GetField() != "postings" || !strings.HasPrefix(v.GetDescription(), bankClientOverdraft) {
				return false
			}
			n++
		}
	}
	return n > 0
}
