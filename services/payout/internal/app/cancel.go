package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Cancel cancels a payout not yet on its way to the rail (finance).
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
		if p.Submitting || (p.Status != domain.StatusActionRequired && p.Status != domain.StatusCreated) {
			return fmt.Errorf("payout %s is %s and on its way to the rail: only a payout not yet submitted can be canceled: %w",
				p.ID, p.Status, apperr.ErrPrecondition)
		}
		return tx.Move(ctx, &p, domain.StatusCanceled, reason, a.Clock.Now())
	})
}
