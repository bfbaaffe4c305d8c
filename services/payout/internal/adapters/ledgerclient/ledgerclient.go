// Package ledgerclient implements payout's app.Ledger over the ledger
// service's gRPC API (svc.Deps.Internal).
package ledgerclient

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Ledger is app.Ledger over the ledger service's gRPC API.
type Ledger struct {
	Client ledgerv1.LedgerServiceClient
}

var _ app.Ledger = Ledger{}

// Available implements app.Ledger.
func (l Ledger) Available(ctx context.Context, provider, currency string) (decimal.Decimal, error) {
	account := domain.AvailableAccount(provider)
	resp, err := l.Client.GetAccount(ctx, &ledgerv1.GetAccountRequest{Address: account})
	if status.Code(err) == codes.NotFound {
		return decimal.Zero, nil
	}
	if err != nil {
		return decimal.Zero, fmt.Errorf("ledger balance of %s: %w", account, err)
	}
	for _, b := range resp.GetAccount().GetBalances() {
		if b.Currency == currency {
			d, err := decimal.NewFromString(b.Amount)
			if err != nil {
				return decimal.Zero, fmt.Errorf("ledger balance %q of %s: %w", b.Amount, account, err)
			}
			return d, nil
		}
	}
	return decimal.Zero, nil
}

// Transfer implements app.Ledger: invalid input (an overdraft) is
// app.ErrLedgerRefused and permanent, as are a conflicting key, a refused
// identity and a failed precondition; anything else is retried.
func (l Ledger) Transfer(ctx context.Context, t domain.LedgerTransfer) error {
	cur, err := money.Lookup(t.Currency)
	if err != nil {
		return app.Permanent(err)
	}
	amt := cur.Format(t.Amount)
	_, err = l.Client.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: t.Key,
		Description:    t.Description,
		Metadata:       t.Metadata,
		Postings: []*ledgerv1.Posting{
			{Account: t.Debit, Direction: "debit", Amount: amt, Currency: cur.Code},
			{Account: t.Credit, Direction: "credit", Amount: amt, Currency: cur.Code},
		},
	})
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.InvalidArgument:
		return app.Permanent(app.Refused(err))
	case codes.Aborted, codes.AlreadyExists, codes.PermissionDenied, codes.FailedPrecondition:
		// Aborted is the ledger's answer to a key holding another
		// transaction (apperr.ErrConflict): it was retried without end.
		return app.Permanent(err)
	}
	return err
}

var _ app.Deposits = Ledger{}

// Deposit implements app.Deposits over the ledger's CreateDeposit
// (idempotent on external_ref): the same external reference with another
// renter, currency or amount (409), or a deposit the ledger refuses as
// invalid, is app.ErrDepositRefused.
func (l Ledger) Deposit(ctx context.Context, renterID, currency string, amount decimal.Decimal, externalRef string) (string, error) {
	cur, err := money.Lookup(currency)
	if err != nil {
		return "", fmt.Errorf("deposit %s: %w", externalRef, err)
	}
	resp, err := l.Client.CreateDeposit(ctx, &ledgerv1.CreateDepositRequest{RenterId: renterID, Amount: cur.Format(amount),
		Currency: cur.Code, ExternalRef: externalRef})
	switch status.Code(err) {
	case codes.OK:
		return resp.GetTransaction().GetTransactionId(), nil
	case codes.Aborted, codes.AlreadyExists, codes.InvalidArgument:
		return "", fmt.Errorf("deposit %s: %w: %w", externalRef, app.ErrDepositRefused, err)
	}
	return "", fmt.Errorf("deposit %s: %w", externalRef, err)
}

var _ app.LedgerEntries = Ledger{}

// Entry implements app.LedgerEntries over the ledger's GetTransaction (the
// service identity reads every entry whole).
func (l Ledger) Entry(ctx context.Context, id string) (domain.LedgerEntry, error) {
	resp, err := l.Client.GetTransaction(ctx, &ledgerv1.GetTransactionRequest{TransactionId: id})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound, codes.InvalidArgument:
		// InvalidArgument: not a transaction id at all.
		return domain.LedgerEntry{}, fmt.Errorf("ledger transaction %s: %w", id, apperr.ErrNotFound)
	default:
		return domain.LedgerEntry{}, fmt.Errorf("ledger transaction %s: %w", id, err)
	}
	return entry(resp.GetTransaction())
}

// Entries implements app.LedgerEntries over the ledger's ListTransactions
// by transaction_ids: one call for up to app.LedgerEntriesPerRead entries.
func (l Ledger) Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	resp, err := l.Client.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{TransactionIds: ids})
	if err != nil {
		return nil, fmt.Errorf("ledger transactions %s ... (%d): %w", ids[0], len(ids), err)
	}
	out := make([]domain.LedgerEntry, 0, len(resp.GetTransactions()))
	for _, t := range resp.GetTransactions() {
		e, err := entry(t)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// entry is the ledger's transaction t as payout reads it.
func entry(t *ledgerv1.Transaction) (domain.LedgerEntry, error) {
	id := t.GetTransactionId()
	if t.GetPostingsWithheld() {
		return domain.LedgerEntry{}, fmt.Errorf("ledger transaction %s: its postings withheld from payout's identity", id)
	}
	e := domain.LedgerEntry{ID: t.GetTransactionId(), Reverses: t.GetReverses(), ReversedBy: t.GetReversedBy(), Metadata: t.GetMetadata()}
	for _, p := range t.GetPostings() {
		amt, err := decimal.NewFromString(p.GetAmount())
		if err != nil {
			return domain.LedgerEntry{}, fmt.Errorf("ledger transaction %s: amount %q: %w", id, p.GetAmount(), err)
		}
		e.Postings = append(e.Postings, domain.LedgerPosting{Account: p.GetAccount(), Direction: p.GetDirection(), Currency: p.GetCurrency(), Amount: amt})
	}
	return e, nil
}
