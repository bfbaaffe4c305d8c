package bankfile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
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

// Limits of finance's reviews.
const (
	resolutionReasonLenMax = domain.ReasonLenMax // bytes of the reason a resolution is kept with
	reviewsListedMax       = 50                  // transfers in review a hold's answer lists (the oldest)
)

const reviewCols = `v.review_id, t.end_to_end_id, t.reference, t.provider_id, t.currency, t.amount, t.state, v.cause, v.note, v.since,
	v.resolution, v.paid_amount, v.resolved_by, v.resolved_at, v.resolution_reason`

func scanReview(row pgx.CollectableRow) (app.BankTransferReview, error) {
	var v app.BankTransferReview
	return v, row.Scan(&v.ReviewID, &v.EndToEndID, &v.Reference, &v.ProviderID, &v.Currency, &v.Amount, &v.State, &v.Cause, &v.Note, &v.Since,
		&v.Resolution, &v.PaidAmount, &v.ResolvedBy, &v.ResolvedAt, &v.ResolutionReason)
}

// openReviews are the transfers in review, the oldest first (at most
// reviewsListedMax), and how many there are.
func openReviews(ctx context.Context, q querier) ([]app.BankTransferReview, int, error) {
	rows, err := q.Query(ctx, `select `+reviewCols+` from payout.bank_transfer_reviews v join payout.bank_transfers t using (reference)
		where v.resolved_at is null order by v.since, t.reference limit $1`, reviewsListedMax)
	if err != nil {
		return nil, 0, err
	}
	vs, err := pgx.CollectRows(rows, scanReview)
	if err != nil || len(vs) < reviewsListedMax {
		return vs, len(vs), err
	}
	rows, err = q.Query(ctx, `select count(*) from payout.bank_transfer_reviews where resolved_at is null`)
	if err != nil {
		return nil, 0, err
	}
	total, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	return vs, total, err
}

// checkResolution refuses a resolution that does not say what the bank did.
func checkResolution(res app.BankTransferResolution) error {
	switch {
	case strings.TrimSpace(res.EndToEndID) == "":
		return apperr.Invalid("end_to_end_id", "required")
	case res.Resolution != app.BankResolvePaid && res.Resolution != app.BankResolveRequeue:
		return apperr.Invalid("resolution", "%s or %s", app.BankResolvePaid, app.BankResolveRequeue)
	case strings.TrimSpace(res.Reason) == "":
		return apperr.Invalid("reason", "required: what was checked (the bank's statement line, its answer)")
	case len(res.Reason) > resolutionReasonLenMax || !utf8.ValidString(res.Reason):
		return apperr.Invalid("reason", "at most %d bytes of UTF-8", resolutionReasonLenMax)
	case res.Resolution == app.BankResolvePaid && !res.Amount.IsPositive():
		return apperr.Invalid("amount", "required with %s: the amount the bank paid (a positive amount)", app.BankResolvePaid)
	case res.Resolution == app.BankResolveRequeue && !res.Amount.IsZero():
		return apperr.Invalid("amount", "only with %s", app.BankResolvePaid)
	}
	return nil
}

// ResolveTransfer implements app.BankFiles. Under the imports' lock, so
// no report of the bank moves the transfer meanwhile. Paid, the transfer
// is booked and its payout follows: paid at the transfer's amount, or at
// another one (a payout made again with another net) held submitted as
// rail_amount_mismatch, the amount reported by Query; put back on
// the queue, it goes into the first batch cut (after the restore hold's
// release).
func (r *Rail) ResolveTransfer(ctx context.Context, res app.BankTransferResolution) (app.BankTransferReview, error) {
	if err := checkResolution(res); err != nil {
		return app.BankTransferReview{}, err
	}
	var out app.BankTransferReview
	resolved := false
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		if err := lockImports(ctx, tx); err != nil {
			return err
		}
		var ref, state, ccy string
		var amt decimal.Decimal
		err := tx.QueryRow(ctx, `select reference, state, currency, amount from payout.bank_transfers where end_to_end_id = $1 for update`, res.EndToEndID).
			Scan(&ref, &state, &ccy, &amt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("bank transfer %s: %w", res.EndToEndID, apperr.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if res.Resolution == app.BankResolvePaid {
			if cur, err := money.Lookup(ccy); err != nil || !strings.EqualFold(res.Currency, ccy) || !cur.Round(res.Amount).Equal(res.Amount) {
				return apperr.Invalid("amount", "the amount the bank paid, in the transfer's currency %s at its minor unit", ccy)
			}
		}
		id, open, err := reviewFor(ctx, tx, ref, state, res)
		if err != nil {
			return err
		}
		if open {
			if err := r.resolve(ctx, tx, id, ref, res); err != nil {
				return err
			}
			resolved = true
		}
		rows, err := tx.Query(ctx, `select `+reviewCols+` from payout.bank_transfer_reviews v join payout.bank_transfers t using (reference) where v.review_id = $1`, id)
		if err != nil {
			return err
		}
		out, err = pgx.CollectExactlyOneRow(rows, scanReview)
		return err
	})
	if oe := (*openReviewError)(nil); errors.As(err, &oe) {
		r.Log.Error("bank transfer has an open review while not in review: the payout database is inconsistent; mend it (the transfer "+
			"back in review, or the review closed) before finance resolves it", "end_to_end_id", oe.e2e, "reference", oe.ref, "state", oe.state,
			"review_id", oe.review.id, "cause", oe.review.cause, "since", oe.review.since, "resolution", res.Resolution, "by", res.By)
		return app.BankTransferReview{}, err
	}
	var ie *apperr.InvalidError
	if errors.As(err, &ie) || errors.Is(err, apperr.ErrNotFound) || errors.Is(err, apperr.ErrPrecondition) || errors.Is(err, apperr.ErrConflict) {
		return app.BankTransferReview{}, err
	}
	if err != nil {
		return app.BankTransferReview{}, fmt.Errorf("resolve bank transfer %s: %w", res.EndToEndID, err)
	}
	if resolved {
		r.reportResolved(out)
	}
	return out, nil
}

// review is a review of a transfer, as reviewFor reads it.
type review struct {
	id                    int64
	cause, resolution, by string
	reason                string
	paid                  *decimal.Decimal
	since                 time.Time
	at                    *time.Time
}

// resolvedAs says whether v is resolved already as res asks, reason and
// all: res is that call sent again. Another reason is another resolution
// (a conflict, as a rail_amount_mismatch's is): answered as the first, it
// was never kept.
func (v review) resolvedAs(res app.BankTransferResolution) bool {
	return v.at != nil && v.resolution == res.Resolution && (v.paid == nil || v.paid.Equal(res.Amount)) && v.reason == res.Reason
}

// reviewFor is the review of the transfer ref (in state) that res answers
// (res.ReviewID; 0: the transfer's latest), locked in tx, and whether it is
// open for res: resolved already by res (sent again, its answer lost), it
// is answered; resolved otherwise (another resolution, amount or reason),
// apperr.ErrConflict naming the first; never held for
// review, apperr.ErrPrecondition, and so is an open review of a transfer
// not in review (an *openReviewError); no such review of the transfer,
// apperr.ErrNotFound. Without a ReviewID, res repeating, reason and all,
// finance's resolution of the review before the open one is a conflict
// naming the open one: the resend of the call that resolved it, its
// answer lost, after a report of the bank opened a review the call never
// saw (a transfer put back on the queue while held, then covered by a
// lost batch's status); applied, it sent again a transfer the bank may
// have paid.
func reviewFor(ctx context.Context, tx pgx.Tx, ref, state string, res app.BankTransferResolution) (id int64, open bool, err error) {
	rows, err := tx.Query(ctx, `select review_id, cause, resolution, resolved_by, resolution_reason, paid_amount, since, resolved_at
		from payout.bank_transfer_reviews where reference = $1 and ($2::bigint = 0 or review_id = $2)
		order by review_id desc limit 2 for update`, ref, res.ReviewID)
	if err != nil {
		return 0, false, err
	}
	vs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (review, error) {
		var v review
		return v, row.Scan(&v.id, &v.cause, &v.resolution, &v.by, &v.reason, &v.paid, &v.since, &v.at)
	})
	switch {
	case err != nil:
		return 0, false, err
	case len(vs) == 0 && res.ReviewID != 0:
		return 0, false, fmt.Errorf("bank transfer %s has no review %d: %w", res.EndToEndID, res.ReviewID, apperr.ErrNotFound)
	case len(vs) == 0:
		return 0, false, fmt.Errorf("bank transfer %s is %s: only a transfer held for review is resolved: %w", res.EndToEndID, state, apperr.ErrPrecondition)
	}
	v := vs[0]
	switch {
	case v.resolvedAs(res):
		return v.id, false, nil
	case v.at != nil:
		what := v.resolution
		if v.paid != nil {
			what += " " + v.paid.String()
		}
		return 0, false, fmt.Errorf("bank transfer %s's review %d was resolved %s by %s at %s for %q: %w",
			res.EndToEndID, v.id, what, v.by, v.at.UTC().Format(time.RFC3339), v.reason, apperr.ErrConflict)
	case state != stateReview:
		return 0, false, &openReviewError{e2e: res.EndToEndID, ref: ref, state: state, review: v}
	case res.ReviewID == 0 && len(vs) == 2 && vs[1].resolvedAs(res):
		return 0, false, fmt.Errorf("bank transfer %s's review %d was resolved %s by %s at %s with this reason, and it is held for review "+
			"again since %s (review %d, %s): taken as that resolution sent again, it is not applied to the newer review; to resolve review %d, "+
			"name it (review_id): %w", res.EndToEndID, vs[1].id, vs[1].resolution, vs[1].by, vs[1].at.UTC().Format(time.RFC3339),
			v.since.UTC().Format(time.RFC3339), v.id, v.cause, v.id, apperr.ErrConflict)
	}
	return v.id, true, nil
}

// openReviewError is an open review of a transfer not in review: the
// database is inconsistent (mended by hand, or restored in part), and
// which of the two is right only an operator can tell, so nothing is
// resolved. A failed precondition naming both (an untyped error answered
// a bare 500, the detail in no answer), logged at ERROR by ResolveTransfer.
type openReviewError struct {
	e2e, ref, state string
	review          review
}

func (e *openReviewError) Error() string {
	return fmt.Sprintf("bank transfer %s is %s, not %s, while its review %d (%s, since %s) is open: the payout database is inconsistent "+
		"(logged for an operator), and the review is not resolved until it is mended", e.e2e, e.state, stateReview, e.review.id, e.review.cause,
		e.review.since.UTC().Format(time.RFC3339))
}

func (e *openReviewError) Unwrap() error { return apperr.ErrPrecondition }

// resolve applies finance's resolution res to the open review id of the
// transfer ref, in tx.
func (r *Rail) resolve(ctx context.Context, tx pgx.Tx, id int64, ref string, res app.BankTransferResolution) error {
	now := r.Clock.Now()
	var paid *decimal.Decimal
	q := `update payout.bank_transfers set state = 'queued', queued_at = $2, updated_at = $2, batch_id = null, pmt_inf_id = '' where reference = $1`
	if res.Resolution == app.BankResolvePaid {
		paid = &res.Amount
		q = `update payout.bank_transfers set state = 'booked', updated_at = $2 where reference = $1`
	}
	if _, err := tx.Exec(ctx, q, ref, now); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `update payout.bank_transfer_reviews set resolution = $2, paid_amount = $3, resolved_by = $4, resolved_at = $5,
		resolution_reason = $6 where review_id = $1`, id, res.Resolution, paid, res.By, now, res.Reason)
	return err
}

// reportResolved logs finance's resolution and wakes the payout of a
// transfer resolved paid. Paid at another amount than the transfer's, the
// payout is not recorded paid (Query reports the bank's amount: the payout
// workflow's rail_amount_mismatch): finance corrects the ledger by hand.
func (r *Rail) reportResolved(v app.BankTransferReview) {
	args := []any{"end_to_end_id", v.EndToEndID, "reference", v.Reference, "resolution", v.Resolution, "cause", v.Cause,
		"resolved_by", v.ResolvedBy, "reason", v.ResolutionReason, "amount", v.Amount.String(), "currency", v.Currency}
	if v.PaidAmount != nil && !v.PaidAmount.Equal(v.Amount) {
		r.Log.Warn("bank transfer resolved paid at another amount than the transfer's: its payout stays submitted (rail_amount_mismatch) "+
			"for finance to correct the ledger by hand",
			append(args, "paid_amount", v.PaidAmount.String(), "difference", v.PaidAmount.Sub(v.Amount).String())...)
	} else {
		r.Log.Info("bank transfer in review resolved", args...)
	}
	if v.Resolution == app.BankResolvePaid && r.Notify != nil {
		r.Notify(v.Reference)
	}
}
