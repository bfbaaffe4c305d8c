package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// DepositInput is a renter top-up.
type DepositInput struct {
	RenterID    string
	Amount      string
	Currency    string
	ExternalRef string // the bank reference: the idempotency key
}

// Deposit posts Dr bank:client, Cr renter:{id}:wallet, idempotent on the
// external reference. A closed renter takes no new deposit (checkRenterOpen).
func (a *App) Deposit(ctx context.Context, in DepositInput) (*domain.Transaction, error) {
	var vs []domain.Violation
	var wallet domain.Account
	if err := ids.CheckPartyID(in.RenterID); err != nil {
		vs = append(vs, domain.Violation{Field: "renter_id", Reason: err.Error()})
	} else if wallet, err = domain.ParseAddress(domain.RenterWallet(in.RenterID)); err != nil {
		vs = append(vs, domain.Violation{Field: "renter_id", Reason: err.Error()})
	}
	ref := strings.TrimSpace(in.ExternalRef)
	if ref == "" || len(ref) > domain.IdempotencyKeyMax-len("deposit:") {
		vs = append(vs, domain.Violation{Field: "external_ref", Reason: "required, at most 248 characters"})
	}
	cur, err := money.Lookup(in.Currency)
	if err != nil {
		vs = append(vs, domain.Violation{Field: "currency", Reason: err.Error()})
		return nil, invalid(vs)
	}
	amt, err := cur.Parse(in.Amount)
	if err != nil {
		vs = append(vs, domain.Violation{Field: "amount", Reason: err.Error()})
	} else if !amt.IsPositive() {
		vs = append(vs, domain.Violation{Field: "amount", Reason: fmt.Sprintf("%s must be positive", in.Amount)})
	}
	if err := invalid(vs); err != nil {
		return nil, err
	}
	bank, err := domain.ParseAddress(domain.BankClient)
	if err != nil {
		return nil, fmt.Errorf("client bank account: %w", err)
	}
	hash, err := domain.RequestHash("deposit", map[string]any{
		"renter_id": in.RenterID, "amount": amt.String(), "currency": cur.Code})
	if err != nil {
		return nil, err
	}
	if err := a.checkRenterOpen(ctx, in.RenterID, domain.DepositKeyPrefix+ref); err != nil {
		return nil, err
	}
	now := a.now()
	t := &domain.Transaction{
		ID: ids.New(""), IdempotencyKey: domain.DepositKeyPrefix + ref, Kind: domain.TxDeposit,
		Description: "renter top-up " + ref, EffectiveAt: now, CreatedAt: now,
		Metadata: map[string]string{"external_ref": ref, "renter_id": in.RenterID},
		Postings: []domain.Posting{
			{Account: bank, Direction: domain.Debit, Amount: amt, Currency: cur.Code},
			{Account: wallet, Direction: domain.Credit, Amount: amt, Currency: cur.Code},
		},
		RequestHash: hash,
	}
	// Its audit record, as the interceptor would store it for this answer
	// (the request's ids, the transaction's id and key), goes into the
	// write's own transaction, as a manual entry's does: a deposit the
	// group commits after its caller stopped waiting is recorded as what it
	// did, not only as the caller's Canceled.
	return a.postGrouped(ctx, t, audited(audit.ClaimFrom(ctx), "transaction_id="+t.ID, "idempotency_key="+t.IdempotencyKey))
}

// checkRenterOpen refuses a new deposit to a closed renter's wallet (a
// conflict naming the renter and its close): the renter has left, its
// balance is refunded by finance, and money credited after that would sit
// in a wallet nobody spends or returns. Money that did arrive for it stays
// outside the ledger where finance sees it: a bank transfer as an
// unmatched line of the reconciliation (returned to its payer), a rail
// top-up as a rejected notification (GpubillTopUpNotApplied; refunded at
// the rail). A deposit posted under key before the close is answered as
// any replay is. The close reaches the ledger by party.updated: a deposit
// posted before it arrives was taken while the ledger knew the renter open.
func (a *App) checkRenterOpen(ctx context.Context, renterID, key string) error {
	closedAt, err := a.Store.RenterClosedAt(ctx, renterID)
	if err != nil || closedAt.IsZero() {
		return err
	}
	_, _, err = a.Store.TxByKey(ctx, key)
	switch {
	case err == nil:
		return nil // posted before: the group answers the replay (or the key's conflict)
	case !errors.Is(err, apperr.ErrNotFound):
		return fmt.Errorf("deposit %s: %w", key, err)
	}
	return fmt.Errorf("renter %s is closed (since %s): a closed renter's wallet takes no deposit; return the money to its payer: %w",
		renterID, closedAt.UTC().Format(time.RFC3339), apperr.ErrConflict)
}
