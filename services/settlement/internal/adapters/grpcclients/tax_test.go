package grpcclients

import (
	"context"
	"errors"
	"testing"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// answering is a connection whose every call answers err.
type answering struct{ err error }

func (a answering) Invoke(context.Context, string, any, any, ...grpc.CallOption) error { return a.err }

func (a answering) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

// The tax service's "not yet" (no tax profile of the provider received, a
// malformed jurisdiction the party feed corrects) is retried, so the
// provider settles once the profile arrives: it was Rejected, the provider
// left pending until a :close by hand. Its refusals of the request are
// still Rejected.
func TestComputeWithholdingRetriesWhatThePartyFeedFixes(t *testing.T) {
	in := app.TaxInput{ProviderID: "p-1", CycleID: "cyc-20260101", Currency: "CNY", Gross: decimal.NewFromInt(100),
		CommissionRate: decimal.RequireFromString("0.25"), IdempotencyKey: "k"}
	for _, tc := range []struct {
		code     codes.Code
		rejected bool
	}{{codes.FailedPrecondition, false}, {codes.Unavailable, false}, {codes.InvalidArgument, true}, {codes.Aborted, true}} {
		_, err := NewTax(answering{status.Error(tc.code, "x")}).ComputeWithholding(context.Background(), in)
		if err == nil || app.IsRejected(err) != tc.rejected {
			t.Errorf("%s: %v, rejected %v; want rejected %v", tc.code, err, app.IsRejected(err), tc.rejected)
		}
	}
}
