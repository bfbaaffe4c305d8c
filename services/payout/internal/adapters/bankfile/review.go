package bankfile

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// reviewNote says, in an entry's note, that the transfer (from state
// from) left the queue for finance's review, and why.
func reviewNote(from, e2e, why string) string {
	return from + " → " + stateReview + ": " + why + "; sent again it would be paid twice: for finance to resolve " +
		"(POST /v1/bank-transfers/" + e2e + ":resolve)"
}

// toReview moves the queued transfer ref to review in tx, for cause
// (app.Review*), the note saying what the bank's report said, and reports
// whether it moved (false: it was not queued). After a restore, a
// transfer queued again that the bank has, or may have, under terms the
// rail cannot apply left in the queue went into the first batch after the
// release: paid twice.
func (r *Rail) toReview(ctx context.Context, tx pgx.Tx, ref, cause, note string) (bool, error) {
	now := r.Clock.Now()
	tag, err := tx.Exec(ctx, `update payout.bank_transfers set state = 'review', updated_at = $2 where reference = $1 and state = 'queued'`, ref, now)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if _, err := tx.Exec(ctx, `insert into payout.bank_transfer_reviews (reference, cause, note, since) values ($1, $2, $3, $4)`,
		ref, cause, note, now); err != nil {
		return false, err
	}
	return true, nil
}

// closeReviewByBank closes, in tx, the open review of ref that a report of
// the bank has just settled (booked, rejected or returned it): why names
// the report's entry.
func (r *Rail) closeReviewByBank(ctx context.Context, tx pgx.Tx, ref, why string) error {
	_, err := tx.Exec(ctx, `update payout.bank_transfer_reviews set resolution = 'bank', resolved_by = 'bank', resolved_at = $2, resolution_reason = $3
		where reference = $1 and resolved_at is null`, ref, r.Clock.Now(), why)
	return err
}
