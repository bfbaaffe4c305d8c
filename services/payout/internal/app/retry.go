package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Retry sends a failed or returned payout again as a new attempt (new rail
// reference), once the provider's payout method changed after the attempt
// was submitted, or at once for a failure not the payee's (domain.PayeeFailure);
// its workflow is started again by the starter. The retry sent again
// changes nothing while the new attempt stands (not failed or returned).
func (a *Payouts) Retry(ctx context.Context, id, why string) error {
	return a.Store.Update(ctx, func(tx Tx) error {
		p, err := tx.Lock(ctx, id)
		if err != nil {
			return err
		}
		if p.Status != domain.StatusFailed && p.Status != domain.StatusReturned {
			// Settled outside, its net was paid by hand: a retry paid it
			// again, out of a newer cycle's money.
			if p.Attempt > 1 && p.Status != domain.StatusCanceled && p.Status != domain.StatusSettledOutside {
				// A retry sent again (its answer lost): the attempt it
				// asked for is on its way or done; the caller reads it.
				return nil
			}
			return fmt.Errorf("payout %s is %s: only a failed or returned payout can be retried: %w", p.ID, p.Status, apperr.ErrPrecondition)
		}
		// Failed again after a settlement outside by several entries, one
		// of them reversed: the others stand, paid by hand, and a retry
		// paid the whole net again (failedAgain).
		standing, err := tx.SettledOutsideBy(ctx, p.ID)
		if err != nil {
			return err
		}
		if len(standing) > 0 {
			return fmt.Errorf("payout %s is still paid in part by hand by ledger transaction %s: settle it outside again naming it "+
				"with entries for the rest, or reverse it, before a retry: %w", p.ID, strings.Join(standing, ", "), apperr.ErrPrecondition)
		}
		// Since the attempt was submitted, not since it failed: a method
		// corrected while the payout was in transit, before the bank
		// returned it days later, was "not changed", and the same PUT
		// again changes nothing: the money stayed in available.
		changed, err := tx.MethodChangedSince(ctx, p.ProviderID, p.ID, p.UpdatedAt)
		if err != nil {
			return err
		}
		if !changed && domain.PayeeFailure(p.FailureCode) {
			return fmt.Errorf("payout %s: the payout method has not changed since it %s: %w", p.ID, p.Status, apperr.ErrPrecondition)
		}
		note := fmt.Sprintf("retry (attempt %d)", p.Attempt+1)
		if why != "" {
			note += ": " + why
		}
		p.Attempt++
		p.Submitting, p.SubmitRail, p.RailRef, p.FailureCode, p.FailureMessage, p.ExpectedArrival, p.PaidAt = false, "", "", "", "", nil, nil
		if err := tx.Move(ctx, &p, domain.StatusCreated, note, a.Clock.Now()); err != nil {
			return err
		}
		return tx.ResetWorkflow(ctx, p.ID)
	})
}
