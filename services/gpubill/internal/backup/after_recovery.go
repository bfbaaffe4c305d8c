package backup

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger"
)

// AfterRecovery runs restore's last step (afterRestore: kept published
// messages back into their outboxes, unfinished payouts marked for a new
// workflow, a new restore epoch; one transaction) on a database recovered by
// other means than Restore: CloudNativePG's point-in-time recovery, a volume
// snapshot, a pg_basebackup. Without it the charges published but not
// applied at the recovery point were never sent again and the unfinished
// payouts never restarted. It is also the way out of a gpubill restore
// interrupted after its load (pg.ErrRestorePending): the step clears the
// mark that keeps gpubill from starting on it. There is no manifest to
// compare with: it first
// runs what Restore's verification has without one (ledger verify: the
// hash chain, every balance, the report records), and refuses a ledger that
// fails it, or a cluster whose transaction ids are behind the journal's (a
// logical dump loaded into another cluster, which only Restore advances),
// changing nothing. It refuses too while a gpubill service runs on the
// database (ErrServicesRunning). It never creates the database.
//
// Run twice, the second run finds nothing kept as published nor any payout
// marked started (unless services ran in between): it moves nothing more,
// and gives another epoch.
func AfterRecovery(ctx context.Context, dsn string) (*Result, error) {
	conn, err := pgx.Connect(ctx, dsn)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		return nil, fmt.Errorf("%w: %s (check DATABASE_URL)", pg.ErrNoDatabase, pgErr.Message)
	}
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res := &Result{Database: conn.Config().Database}
	var hasLedger bool
	if err := conn.QueryRow(ctx, `select to_regclass('ledger.journal_chain') is not null`).Scan(&hasLedger); err != nil {
		return nil, fmt.Errorf("look for the ledger: %w", err)
	}
	if !hasLedger {
		return nil, fmt.Errorf("%w: ledger has not been migrated in database %q (check DATABASE_URL)", pg.ErrNoSchema, res.Database)
	}
	var xidNext uint64
	if err := pg.InSnapshot(ctx, conn, func(tx pgx.Tx) (err error) {
		if res.Restored, err = ledger.ReadFigures(ctx, tx); err != nil {
			return fmt.Errorf("recovered ledger figures: %w", err)
		}
		if res.Chain, err = ledger.VerifyChain(ctx, tx); err != nil {
			return fmt.Errorf("verify recovered chain: %w", err)
		}
		return tx.QueryRow(ctx, `select pg_snapshot_xmax(pg_current_snapshot())::text::numeric::bigint`).Scan(&xidNext)
	}); err != nil {
		return nil, err
	}
	if broken := chainBroken(res.Chain); broken != "" {
		return res, fmt.Errorf("ledger verify on the recovered database: %s (nothing was changed; do not start gpubill on it)", broken)
	}
	// The chain orders transactions by the id that wrote them: new ones
	// with smaller ids would never be chained.
	if xidNext <= res.Restored.XidMax {
		return res, fmt.Errorf("the journal carries transaction ids up to %d and this cluster is at %d: the database was not recovered "+
			"from this cluster's own history (a dump loaded into another cluster?); load a gpubill backup with gpubill restore, "+
			"which advances them (nothing was changed)", res.Restored.XidMax, xidNext)
	}
	if err := afterRestore(ctx, conn, res, recoveryRemedy); err != nil {
		return res, err
	}
	return res, nil
}
