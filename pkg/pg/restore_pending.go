package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// RestorePendingTable, in schema public, marks a database a gpubill restore
// is loading or has loaded without its last step (outboxes, payouts, the
// bank-file hold, a new restore epoch; backup's afterRestore) having
// committed. The restore creates it in the empty database before the load
// commits and drops it in the last step's transaction, so a restore killed
// anywhere between (kill -9, OOM, a dropped SSH session) leaves it behind:
// without it, the loaded database looked ready, and services started on it
// never sent the snapshot's published messages again, never restarted its
// payouts, cut bank files unheld and issued ids and ETags again under the
// source's epoch. Backups leave it out.
const RestorePendingTable = "gpubill_restore_pending"

// ErrRestorePending: a gpubill restore into the database did not finish.
var ErrRestorePending = errors.New("a gpubill restore into this database did not finish")

// RestorePendingRemedy is what the operator does about ErrRestorePending.
const RestorePendingRemedy = "its last step (published messages back into the outboxes, payouts restarted, " +
	"the bank-file rail held, a new restore epoch) did not run, and gpubill does not start on it: " +
	"drop it and restore again, or, with every gpubill service on it stopped, run gpubill after-recovery --services-stopped"

var restorePending = pgx.Identifier{"public", RestorePendingTable}.Sanitize()

// Execer is a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MarkRestorePending creates the marker (committed at once on a connection
// outside a transaction). A marker left by an attempt whose load failed
// is kept.
func MarkRestorePending(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, "create table if not exists "+restorePending+" (started_at timestamptz not null default now())"); err != nil {
		return fmt.Errorf("mark the restore pending: %w", err)
	}
	return nil
}

// ClearRestorePending drops the marker, if any, in tx: the restore's last
// step, committed with it.
func ClearRestorePending(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "drop table if exists "+restorePending); err != nil {
		return fmt.Errorf("clear the pending restore's mark: %w", err)
	}
	return nil
}

// RestoreFinished is ErrRestorePending, with its remedy, while the marker
// exists.
func RestoreFinished(ctx context.Context, q RowQuerier) error {
	pending, err := IsRestorePending(ctx, q)
	if err != nil {
		return err
	}
	if pending {
		return fmt.Errorf("%w: %s", ErrRestorePending, RestorePendingRemedy)
	}
	return nil
}

// IsRestorePending reports whether the marker exists.
func IsRestorePending(ctx context.Context, q RowQuerier) (bool, error) {
	var pending bool
	if err := q.QueryRow(ctx, `select to_regclass($1) is not null`, restorePending).Scan(&pending); err != nil {
		return false, fmt.Errorf("look for an unfinished restore: %w", err)
	}
	return pending, nil
}
