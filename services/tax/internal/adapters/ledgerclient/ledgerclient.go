// Package ledgerclient implements the tax service's app.Ledger over the ledger
// service's gRPC API (svc.Deps.Internal).
package ledgerclient

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"

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
func (l Ledger) PostRemittance(ctx context.Context, r domain.Remittance) (domain.PostedTx, error) {
	cur, err := money.Lookup(r.Currency)
	if err != nil {
		return domain.PostedTx{}, err
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
		return domain.PostedTx{}, err
	}
	t := resp.GetTransaction()
	return domain.PostedTx{ID: t.GetTransactionId(), Reversed: t.GetReversedBy() != "", ReversedBy: t.GetReversedBy()}, nil
}

// Posted implements app.Ledger: the ledger's listing by idempotency keys.
func (l Ledger) Posted(ctx context.Context, keys []string) (map[string]domain.PostedTx, error) {
	resp, err := l.Client.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{IdempotencyKeys: keys})
	if err != nil {
		return nil, fmt.Errorf("ledger transactions by key: %w", err)
	}
	out := make(map[string]domain.PostedTx, len(resp.GetTransactions()))
	for _, t := range resp.GetTransactions() {
		p := domain.PostedTx{ID: t.GetTransactionId(), Reversed: t.GetReversedBy() != "", ReversedBy: t.GetReversedBy(),
			Credits: map[string]decimal.Decimal{}}
		for _, leg := range t.GetPostings() {
			if leg.GetDirection() != "credit" {
				continue
			}
			amt, err := decimal.NewFromString(leg.GetAmount())
			if err != nil {
				return nil, fmt.Errorf("ledger transaction %s: amount %q: %w", p.ID, leg.GetAmount(), err)
			}
			k := leg.GetAccount() + " " + leg.GetCurrency()
			p.Credits[k] = p.Credits[k].Add(amt)
		}
		out[t.GetIdempotencyKey()] = p
	}
	return out, nil
}
