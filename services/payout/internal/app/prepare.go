package app

import (
	"context"
	"errors"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Prepare passes a payout through the gate: it returns action_required
// (wait: KYC, method, hold or minimum, the reason recorded), created (go:
// the payout is now marked for submission and can no longer be canceled),
// or the status it already has when it is past the gate.
func (a *Payouts) Prepare(ctx context.Context, id string) (string, error) {
	// What available holds is read before the transaction (a ledger call
	// holds no payout lock); the ledger refuses the overdraft atomically at
	// submission all the same (Submit).
	pre, err := a.Store.GetPayout(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return "", Permanent(err)
	}
	if err != nil {
		return "", err
	}
	if domain.CanceledInQueue(pre) {
		// A workflow started again by a restore or a recovery whose
		// snapshot holds the cancel and not its return (Cancel's post
		// failed, the ledger down, and Follow had not posted it yet): posted
		// here, so the workflow ends on canceled as before. Canceled is
		// final: pre cannot move meanwhile.
		if err := a.postCanceled(ctx, pre); err != nil {
			return "", a.railDid(pre, pre.Status, err)
		}
		return pre.Status, nil
	}
	var available decimal.Decimal
	if !pre.Submitting && (pre.Status == domain.StatusActionRequired || pre.Status == domain.StatusCreated) {
		if available, err = a.Ledger.Available(ctx, pre.ProviderID, pre.Currency); err != nil {
			return "", err
		}
	}
	var out string
	err = a.Store.Update(ctx, func(tx Tx) error {
		p, err := tx.Lock(ctx, id)
		if err != nil {
			return err
		}
		out = p.Status
		if p.Submitting || (p.Status != domain.StatusActionRequired && p.Status != domain.StatusCreated) {
			return nil
		}
		st, reason, method, err := tx.Gate(ctx, p, a.Minimums)
		if err != nil {
			return err
		}
		if st == domain.StatusCreated && available.LessThan(p.Net) {
			st, reason = domain.StatusActionRequired, domain.InsufficientAvailableReason(available, p.Net, p.Currency)
		}
		now := a.Clock.Now()
		out = st
		if st == domain.StatusActionRequired {
			if p.Status == domain.StatusCreated {
				return tx.Move(ctx, &p, st, reason, now)
			}
			return tx.SetReason(ctx, &p, reason, now)
		}
		// The rail the attempt is handed to, recorded with the mark: the
		// only one asked about its reference from now on.
		p.Method, p.Submitting, p.SubmitRail = method, true, a.railFor(method)
		if p.Status == domain.StatusActionRequired {
			return tx.Move(ctx, &p, domain.StatusCreated, "ready: kyc verified, payout method set", now)
		}
		return tx.SetSubmitting(ctx, p.ID, method, p.SubmitRail)
	})
	if errors.Is(err, apperr.ErrNotFound) {
		return "", Permanent(err)
	}
	return out, err
}
