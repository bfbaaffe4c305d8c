package pg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RestoreEpochTable is the one-row table (epoch text) in a service's schema
// holding its restore epoch: random when the schema's migration makes it,
// and replaced by NewRestoreEpoch at each restore of the schema. A service
// that builds ids or ETags from counters kept in the database (versions,
// crossings) folds it in: the counters restart from the snapshot's, and
// what was issued after the snapshot is lost with the disaster, so
// without the epoch an id issued again after the restore could name other
// content than it did before.
const RestoreEpochTable = "restore_epoch"

// restoreEpochBytes: 64 random bits. Random, not counted: a counter kept in
// the snapshot gives the same value to each restore of that snapshot, and a
// clock may repeat or step back; two restores sharing an epoch by chance
// is a 2^-64 event.
const restoreEpochBytes = 8

// RowQuerier is a pool, a connection or a transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RestoreEpoch reads schema's restore epoch.
// A service reads it once at start: a restore only loads an empty
// database, and gpubill after-recovery must run with every service stopped
// (--services-stopped; it refuses while an outbox relay holds its lock, but
// a service starting, or between relay attempts, holds none), so the epoch
// of a database a service runs on does not change under it.
func RestoreEpoch(ctx context.Context, q RowQuerier, schema string) (string, error) {
	var e string
	if err := q.QueryRow(ctx, "select epoch from "+pgx.Identifier{schema, RestoreEpochTable}.Sanitize()).Scan(&e); err != nil {
		return "", fmt.Errorf("restore epoch of %s: %w", schema, err)
	}
	return e, nil
}

// NewRestoreEpoch gives every schema holding a restore epoch table one new
// epoch (the same for all), in tx: the restore's last step. It returns the
// epoch and the schemas.
func NewRestoreEpoch(ctx context.Context, tx pgx.Tx) (string, []string, error) {
	b := make([]byte, restoreEpochBytes)
	if _, err := rand.Read(b); err != nil {
		return "", nil, err
	}
	epoch := hex.EncodeToString(b)
	rows, err := tx.Query(ctx, `select schemaname from pg_tables where tablename = $1 order by 1`, RestoreEpochTable)
	if err != nil {
		return "", nil, fmt.Errorf("schemas with a restore epoch: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", nil, fmt.Errorf("schemas with a restore epoch: %w", err)
	}
	for _, s := range schemas {
		tag, err := tx.Exec(ctx, "update "+pgx.Identifier{s, RestoreEpochTable}.Sanitize()+" set epoch = $1", epoch)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("%d rows, want 1", tag.RowsAffected())
		}
		if err != nil {
			return "", nil, fmt.Errorf("set the restore epoch of %s: %w", s, err)
		}
	}
	return epoch, schemas, nil
}
