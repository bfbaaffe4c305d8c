package app

import (
	"context"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// CloseLedgerCycle marks a cycle closed: charges for it from now on accrue to
// the earliest open cycle. It waits for batches posting to the cycle to
// commit (they hold the cycle's lock shared), so once it returns the cycle's
// balances are final. Idempotent: a repeat returns the original close time.
func (a *App) CloseLedgerCycle(ctx context.Context, cycleID string) (time.Time, error) {
	if _, err := a.Calendar.Parse(cycleID); err != nil {
		return time.Time{}, apperr.Invalid("cycle_id", "%s", err.Error())
	}
	var closedAt time.Time
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		if err := tx.LockCycle(ctx, cycleID); err != nil {
			return err
		}
		var err error
		closedAt, err = tx.CloseCycle(ctx, cycleID, a.now())
		return err
	})
	return closedAt.UTC(), err
}
