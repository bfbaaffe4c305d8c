// Package ledgerclient implements the tax service's app.Ledger over the ledger
// service's gRPC API (svc.Deps.Internal).
package ledgerclient

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// Ledger is app.Ledger over the ledger service's gRPC API.
type Ledger struct {
	Client ledgerv1.LedgerServiceClient
}

var _ app.Ledger = Ledger{}

// PostRemittance implements app.Ledger.
func (l Ledger) PostRemittance(ctx context.Context, r domain.Remittance) (string, error) {
	cur, err := money.Lookup(r.Currency)
	if err != nil {
		return "", err
	}
	amt := cur.Format(r.Amount)
	debit, credit := r.Legs()
	resp, err := l.Client.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: r.ID,
		Description:    fmt.Sprintf("tax remittance %s %s", r.Jurisdiction, r.Period),
		Metadata:       map[string]string{"kind": "tax_remittance", "period": r.Period, "jurisdiction": r.Jurisdiction},
		Postings: []*ledgerv1.Posting{
			{Account: debit, Direction: "debit", Amount: amt, Currency: cur.Code},
			{Account: credit, Direction: "credit", Amount: amt, Currency: cur.Code},
		},
	})
	if err != nil {
		return "", err
	}
	return resp.GetTransaction().GetTransactionId(), nil
}
