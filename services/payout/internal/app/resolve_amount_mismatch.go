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

// ResolveRailAmountMismatch records finance's resolution of a payout
// flagged rail_amount_mismatch, in one transaction under the payout's lock:
// the flag resolved (who, why, when) and a history note naming the reason,
// both amounts and the difference, which nothing posts (no account of the
// chart holds it: finance books it by hand). It posts nothing: the payout's
// workflow, woken by the caller, takes the rail's amount as resolved on its
// next poll and records the payout paid, posting the paid movement
// (in_transit to bank:client) itself, as the only poster of a payout's
// movements. Resolve posting it after an unlocked read paid the net out of
// in_transit twice when the workflow had meanwhile seen the rail fail the
// reference (its -failed posting put the net back in available). The
// payout answered is as the transaction left it (still submitted or in
// transit, flagged, unless its workflow moved it since). The same
// resolution again answers the payout as it is; another one, a rail amount
// not the flag's, or a payout not flagged, is a conflict.
func (a *Payouts) ResolveRailAmountMismatch(ctx context.Context, r RailAmountResolution) (domain.Payout, error) {
	r.Reason = strings.TrimSpace(r.Reason)
	if r.Reason == "" {
		return domain.Payout{}, apperr.Invalid("reason", "required: what finance compared (the rail's bill, its line)")
	}
	if err := a.Store.Update(ctx, func(tx Tx) error { return a.resolveFlag(ctx, tx, r) }); err != nil {
		return domain.Payout{}, fmt.Errorf("resolve payout %s rail_amount_mismatch: %w", r.PayoutID, err)
	}
	return a.Store.GetPayout(ctx, r.PayoutID)
}

// resolveFlag resolves the open flag of the payout r names in tx, once,
// the payout locked: its workflow moves it in no transaction between the
// check and the resolution.
func (a *Payouts) resolveFlag(ctx context.Context, tx Tx, r RailAmountResolution) error {
	p, err := tx.Lock(ctx, r.PayoutID)
	if err != nil {
		return err
	}
	f, err := tx.LockRailAmountFlag(ctx, p.ID, p.Attempt)
	if err != nil {
		return notFlagged(p, err)
	}
	if err := checkResolution(p, f, r); err != nil || f.Resolved() {
		return err // resolved already by the same call: answered as it is
	}
	now := a.Clock.Now()
	f.ResolvedBy, f.Reason, f.ResolvedAt = r.By, r.Reason, &now
	if err := tx.ResolveRailAmountFlag(ctx, f); err != nil {
		return err
	}
	return tx.SetFailure(ctx, &p, domain.RailAmountResolvedNote(f, p, r.By, r.Reason), now)
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
