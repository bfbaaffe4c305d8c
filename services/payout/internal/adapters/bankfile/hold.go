package bankfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// ErrHeld: a restore hold is open, so no batch is cut or delivered.
var ErrHeld = errors.New("the bank-file rail is held after a restore until finance releases it (POST /v1/bank-files:release-restore-hold)")

// holdMigration makes payout.bank_file_holds.
const holdMigration = "0017_bank_file_hold.sql"

// HoldAfterRestore opens a restore hold in tx, the transaction of a
// restore's or a recovery's last step. The database is back at its point
// while the bank has what it was sent after it: a transfer sent in a file
// cut after the point is queued again and a batch delivered after it is
// undelivered again; either would go to the bank a second time. A hold
// already open (a snapshot taken while held, or the command run again) is
// held since the later of the two: kept at the snapshot's hold, a cutoff
// between the two was cut again after the release under the id of a batch
// cut and sent before this restore, which the bank refuses as a
// duplicate. A snapshot taken before the hold's migration gets the table
// from the migration's own file.
func HoldAfterRestore(ctx context.Context, tx pgx.Tx, now time.Time) error {
	var found bool
	if err := tx.QueryRow(ctx, `select to_regclass('payout.bank_file_holds') is not null`).Scan(&found); err != nil {
		return fmt.Errorf("hold the bank-file rail: %w", err)
	}
	if !found {
		if err := makeHoldTable(ctx, tx); err != nil {
			return fmt.Errorf("hold the bank-file rail: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `insert into payout.bank_file_holds (held_since) values ($1)
		on conflict ((released_at is null)) where released_at is null
		do update set held_since = greatest(payout.bank_file_holds.held_since, excluded.held_since)`, now); err != nil {
		return fmt.Errorf("hold the bank-file rail: %w", err)
	}
	return nil
}

// makeHoldTable runs the Up part of the hold's migration (it creates only
// what does not exist, so goose applies it again as a no-op).
func makeHoldTable(ctx context.Context, tx pgx.Tx) error {
	b, err := fs.ReadFile(migrations.For("payout"), holdMigration)
	if err != nil {
		return err
	}
	_, up, okUp := strings.Cut(string(b), "-- +goose Up")
	up, _, okDown := strings.Cut(up, "-- +goose Down")
	if !okUp || !okDown {
		return fmt.Errorf("%s: no goose Up and Down sections", holdMigration)
	}
	_, err = tx.Exec(ctx, up) // no arguments: the simple protocol, several statements
	return err
}

// cutHold says whether a hold is open, and the latest hold's start (zero
// if none ever).
func cutHold(ctx context.Context, tx pgx.Tx) (held bool, since time.Time, err error) {
	var last *time.Time
	err = tx.QueryRow(ctx, `select coalesce(bool_or(released_at is null), false), max(held_since) from payout.bank_file_holds`).Scan(&held, &last)
	if last != nil {
		since = *last
	}
	return held, since, err
}

// RestoreHold implements app.BankFiles.
func (r *Rail) RestoreHold(ctx context.Context) (app.BankFileHold, error) {
	var h app.BankFileHold
	var since *time.Time
	err := r.Pool.QueryRow(ctx, `select l.held_since, l.released_at, coalesce(l.released_by, ''),
			(select count(*) from payout.bank_transfers where state = 'queued'),
			(select count(*) from payout.bank_batches where delivered_at is null)
		from (select 1) one left join (select * from payout.bank_file_holds order by hold_id desc limit 1) l on true`).
		Scan(&since, &h.ReleasedAt, &h.ReleasedBy, &h.QueuedTransfers, &h.UndeliveredBatches)
	if err != nil {
		return h, fmt.Errorf("bank-file restore hold: %w", err)
	}
	if since != nil {
		h.HeldSince = *since
	}
	if h.InReview, h.ReviewTransfers, err = openReviews(ctx, r.Pool); err != nil {
		return h, fmt.Errorf("bank-file restore hold: %w", err)
	}
	return h, nil
}

// unappliedNamedMax bounds the transfers a refused release names.
const unappliedNamedMax = 20

// ReleaseRestoreHold implements app.BankFiles. It is refused
// (apperr.ErrPrecondition, naming them) while a queued transfer is named by
// a bank report's entry that found no transfer when it was imported and
// was not applied since (a transfer queued by a version that did not read
// earlier reports, or a report whose bytes were not kept): the bank has
// that transfer, and released, the next file sent it again.
func (r *Rail) ReleaseRestoreHold(ctx context.Context, by string) (app.BankFileHold, error) {
	released := false
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		// Under the imports' lock: no entry is being applied meanwhile.
		if err := lockImports(ctx, tx); err != nil {
			return err
		}
		var open bool
		if err := tx.QueryRow(ctx, `select exists (select 1 from payout.bank_file_holds where released_at is null)`).Scan(&open); err != nil {
			return err
		}
		if !open {
			return nil
		}
		if err := refuseUnapplied(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `update payout.bank_file_holds set released_at = $1, released_by = $2 where released_at is null`, r.Clock.Now(), by)
		released = tag.RowsAffected() == 1
		return err
	})
	if errors.Is(err, apperr.ErrPrecondition) {
		return app.BankFileHold{}, err
	}
	if err != nil {
		return app.BankFileHold{}, fmt.Errorf("release the bank-file restore hold: %w", err)
	}
	h, err := r.RestoreHold(ctx)
	if err != nil {
		return h, err
	}
	if h.HeldSince.IsZero() {
		return h, fmt.Errorf("no restore or recovery has held the bank-file rail: nothing to release: %w", apperr.ErrPrecondition)
	}
	if released {
		r.Log.Warn("bank-file restore hold released: batches are cut and delivered again", "held_since", h.HeldSince, "released_by", by,
			"queued_transfers", h.QueuedTransfers, "undelivered_batches", h.UndeliveredBatches, "review_transfers", h.ReviewTransfers)
	}
	return h, nil
}

// refuseUnapplied is apperr.ErrPrecondition naming the queued transfers an
// unapplied entry of a bank report names (nil if none).
func refuseUnapplied(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `select t.reference, count(*) over () from payout.bank_transfers t
		where t.state = 'queued' and exists (select 1 from payout.bank_file_entries e
			where e.end_to_end_id = t.end_to_end_id and e.outcome = 'unknown_reference')
		order by t.reference limit $1`, unappliedNamedMax)
	if err != nil {
		return err
	}
	var refs []string
	total := 0
	var ref string
	if _, err := pgx.ForEachRow(rows, []any{&ref, &total}, func() error {
		refs = append(refs, ref)
		return nil
	}); err != nil {
		return err
	}
	if total == 0 {
		return nil
	}
	more := ""
	if total > len(refs) {
		more = fmt.Sprintf(" and %d more", total-len(refs))
	}
	return fmt.Errorf("%d queued transfers (%s%s) are named by bank reports imported before they were queued and not applied to them: "+
		"the bank has them, and the next file would send them again; import those reports again (POST /v1/bank-files, or the inbox), then release: %w",
		total, strings.Join(refs, ", "), more, apperr.ErrPrecondition)
}
