package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/pg"
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
	err := pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext($1))`, cycleLockKey(cycleID)); err != nil {
			return fmt.Errorf("lock cycle %s: %w", cycleID, err)
		}
		if _, err := tx.Exec(ctx, `insert into ledger.closed_cycles (cycle_id, closed_at) values ($1, $2)
			on conflict (cycle_id) do nothing`, cycleID, a.now()); err != nil {
			return fmt.Errorf("close cycle %s: %w", cycleID, err)
		}
		return tx.QueryRow(ctx, `select closed_at from ledger.closed_cycles where cycle_id = $1`, cycleID).Scan(&closedAt)
	})
	return closedAt.UTC(), err
}
