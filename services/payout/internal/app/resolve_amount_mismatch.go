package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// RailAmountResolution is finance closing a payout flagged
// rail_amount_mismatch: the rail's amount as finance read it on the rail's
// bill (it must be the one the flag recorded), why, and who.
type RailAmountResolution struct {
	PayoutID   string
	RailAmount decimal.Decimal
	Reason     string
	By         string
}

// ResolveRailAmountMismatch records a flagged payout paid at its net
// (finance): the ledger's paid posting (in_transit to bank:client, as the
// rail's paid does), the status paid with a history note naming the
// reason, both amounts and the difference, which nothing posts (no account
// of the chart holds it: finance books it by hand). Without it the payout
// stayed submitted for ever, its workflow polling the rail. The same
// resolution again answers the payout as it is; another one, a rail amount
// not the flag's, or a payout not flagged, is a conflict.
func (a *Payouts) ResolveRailAmountMismatch(ctx context.Context, r RailAmountResolution) (domain.Payout, error) {
	r.Reason = strings.TrimSpace(r.Reason)
	if r.Reason == "" {
		return domain.Payout{}, apperr.Invalid("reason", "required: what finance compared (the rail's bill, its line)")
	}
	p, err := a.Store.GetPayout(ctx, r.PayoutID)
	if err != nil {
		return domain.Payout{}, err
	}
	f, err := a.Store.RailAmountFlag(ctx, p.ID, p.Attempt)
	if err != nil {
		return domain.Payout{}, notFlagged(p, err)
	}
	if err := checkResolution(p, f, r); err != nil || f.Resolved() {
		return p, err
	}
	// The ledger first, under the key the rail's paid takes (idempotent):
	// a resolution whose status change fails is sent again and posts
	// nothing twice.
	if err := a.post(ctx, p, domain.StatusPaid); err != nil {
		return domain.Payout{}, fmt.Errorf("resolve payout %s rail_amount_mismatch: %w", p.ID, err)
	}
	if err := a.Store.Update(ctx, func(tx Tx) error { return a.resolvePaid(ctx, tx, p, r) }); err != nil {
		return domain.Payout{}, err
	}
	return a.Store.GetPayout(ctx, p.ID)
}

// resolvePaid moves the flagged payout p to paid in tx, once.
func (a *Payouts) resolvePaid(ctx context.Context, tx Tx, p domain.Payout, r RailAmountResolution) error {
	cur, err := tx.Lock(ctx, p.ID)
	if err != nil {
		return err
	}
	if cur.Attempt != p.Attempt {
		return fmt.Errorf("payout %s was retried meanwhile (attempt %d): %w", p.ID, cur.Attempt, apperr.ErrConflict)
	}
	f, err := tx.LockRailAmountFlag(ctx, p.ID, p.Attempt)
	if err != nil {
		return notFlagged(cur, err)
	}
	if err := checkResolution(cur, f, r); err != nil || f.Resolved() {
		return err // resolved meanwhile by the same call sent twice: answered as it is
	}
	now := a.Clock.Now()
	note := domain.RailAmountResolvedNote(f, cur, r.By, r.Reason)
	cur.PaidAt, cur.FailureCode, cur.FailureMessage = &now, "", ""
	if err := tx.Move(ctx, &cur, domain.StatusPaid, note, now); err != nil {
		return err
	}
	f.ResolvedBy, f.Reason, f.ResolvedAt = r.By, r.Reason, &now
	return tx.ResolveRailAmountFlag(ctx, f)
}

// checkResolution refuses r on p flagged f: a rail amount not the one the
// flag recorded, a payout no longer flagged (the rail failed the
// reference), or another resolution than the one made.
func checkResolution(p domain.Payout, f domain.RailAmountFlag, r RailAmountResolution) error {
	if !r.RailAmount.Equal(f.RailAmount) {
		return fmt.Errorf("payout %s: rail_amount %s is not the amount %s holds under %s, %s (the payout's net is %s): compare the rail's bill: %w",
			p.ID, domain.FormatAmount(r.RailAmount, f.RailCurrency), f.Rail, p.RailRef, domain.FormatAmount(f.RailAmount, f.RailCurrency),
			domain.FormatAmount(p.Net, p.Currency), apperr.ErrConflict)
	}
	if f.Resolved() {
		if f.Reason != r.Reason {
			return fmt.Errorf("payout %s: its rail_amount_mismatch was resolved by %s at %s for %q: %w",
				p.ID, f.ResolvedBy, f.ResolvedAt.UTC().Format("2006-01-02T15:04:05Z"), f.Reason, apperr.ErrConflict)
		}
		return nil
	}
	if p.FailureCode != domain.FailRailAmountMismatch || (p.Status != domain.StatusSubmitted && p.Status != domain.StatusInTransit) {
		return fmt.Errorf("payout %s is %s (failure_code %q), no longer flagged %s: %w",
			p.ID, p.Status, p.FailureCode, domain.FailRailAmountMismatch, apperr.ErrConflict)
	}
	return nil
}

// notFlagged is the conflict of a payout whose attempt was never flagged
// (err apperr.ErrNotFound), or err.
func notFlagged(p domain.Payout, err error) error {
	if !errors.Is(err, apperr.ErrNotFound) {
		return err
	}
	return fmt.Errorf("payout %s is %s (failure_code %q): only a payout flagged %s (its rail holds its reference at another amount) "+
		"is resolved this way: %w", p.ID, p.Status, p.FailureCode, domain.FailRailAmountMismatch, apperr.ErrConflict)
}
