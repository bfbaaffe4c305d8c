package payout

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// AfterRestore readies a payout schema loaded from a snapshot (gpubill
// restore) for a Temporal that has never run its workflows: each payout
// whose workflow still had work is started again by the payout service's
// starter and resumes from the payout's state in the database, as after a
// crash of the worker. It returns how many.
// q is the restore's transaction.
func AfterRestore(ctx context.Context, q pgx.Tx, now time.Time) (int64, error) {
	return postgres.MarkUnstartedAfterRestore(ctx, q, now, app.ReturnWindowDefault)
}
