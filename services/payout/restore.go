package payout

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/adapters/bankfile"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// AfterRestore readies a payout schema loaded from a snapshot (gpubill
// restore) for a Temporal that has never run its workflows: each payout
// whose workflow still had work is started again by the payout service's
// starter and resumes from the payout's state in the database, as after a
// crash of the worker. It returns how many. It holds the bank-file rail
// (no batch cut or delivered) until finance has imported the bank's files
// since the snapshot and releases it: the bank has what it was sent after
// the snapshot, which the database no longer knows was sent.
// q is the restore's transaction.
func AfterRestore(ctx context.Context, q pgx.Tx, now time.Time) (int64, error) {
	n, err := postgres.MarkUnstartedAfterRestore(ctx, q, now, app.ReturnWindowDefault)
	if err != nil {
		return 0, err
	}
	if err := bankfile.HoldAfterRestore(ctx, q, now); err != nil {
		return 0, err
	}
	return n, nil
}
