package ledgerclient

import (
	"context"
	"errors"
	"testing"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// answering is a ledger whose CreateTransaction answers err.
type answering struct {
	ledgerv1.LedgerServiceClient
	err error
}

func (a answering) CreateTransaction(context.Context, *ledgerv1.CreateTransactionRequest, ...grpc.CallOption) (*ledgerv1.CreateTransactionResponse, error) {
	return &ledgerv1.CreateTransactionResponse{}, a.err
}

// What the ledger answers a transfer with, as payout reads it: a key
// holding another transaction is Aborted (apperr.ErrConflict), and was
// retried without end (only AlreadyExists, which the ledger never sends,
// was read as final).
func TestTransferAnswers(t *testing.T) {
	for _, tc := range []struct {
		code               codes.Code
		permanent, refused bool
	}{
		{codes.Aborted, true, false},
		{codes.PermissionDenied, true, false},
		{codes.FailedPrecondition, true, false},
		{codes.InvalidArgument, true, true},
		{codes.Unavailable, false, false},
		{codes.DeadlineExceeded, false, false},
	} {
		l := Ledger{Client: answering{err: status.Error(tc.code, "x")}}
		err := l.Transfer(context.Background(), domain.LedgerTransfer{Key: "k", Currency: "CNY", Amount: decimal.NewFromInt(1),
			Movement: domain.Movement{Debit: "provider:p-1:available", Credit: "provider:p-1:in_transit"}})
		if errors.Is(err, app.ErrPermanent) != tc.permanent || errors.Is(err, app.ErrLedgerRefused) != tc.refused {
			t.Errorf("%s: %v; want permanent %v, refused %v", tc.code, err, tc.permanent, tc.refused)
		}
	}
}
