package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Cancel cancels a payout not yet on its way to the rail (finance). A payout
// canceled already is left as it is (a client's retry of a cancel that
// succeeded was a 400 saying it was "on its way to the rail").
func (a *Payouts) Cancel(ctx context.Context, id, why string) error {
	reason := "canceled by finance"
	if why != "" {
		reason += ": " + why
	}
	return a.Store.Update(ctx, func(tx Tx) error {
		p, err := tx.Lock(ctx, id)
		if err != nil {
			return err
		}
		switch {
		case p.Status == domain.StatusCanceled && p.AbsorbedInto != "":
			// Its money goes with the payout it joined: a 200 here read as
			// stopped while that one was paid.
			return fmt.Errorf("payout %s joined payout %s, which carries its money: cancel %s: %w",
				p.ID, p.AbsorbedInto, p.AbsorbedInto, apperr.ErrPrecondition)
		case p.Status == domain.StatusCanceled:
			return nil
		case p.Submitting:
			return fmt.Errorf("payout %s is being submitted to its rail: only a payout not yet submitted can be canceled: %w", p.ID, apperr.ErrPrecondition)
		case p.Status != domain.StatusActionRequired && p.Status != domain.StatusCreated:
			return fmt.Errorf("payout %s is %s: only a payout not yet submitted can be canceled: %w", p.ID, p.Status, apperr.ErrPrecondition)
		}
		return tx.Move(ctx, &p, domain.StatusCanceled, reason, a.Clock.Now())
	})
}
