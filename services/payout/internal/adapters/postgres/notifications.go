package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

var _ app.NotificationStore = (*Store)(nil)

// NotificationSeen implements app.NotificationStore.
func (s *Store) NotificationSeen(ctx context.Context, rail, key string) (bool, string, error) {
	var digest *string
	err := s.Pool.QueryRow(ctx, `select content_digest from payout.rail_notifications where rail = $1 and notification_key = $2`,
		rail, key).Scan(&digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	if err != nil || digest == nil {
		return err == nil, "", err
	}
	return true, *digest, nil
}

// RecordNotification implements app.NotificationStore.
func (s *Store) RecordNotification(ctx context.Context, rail, key, kind, reference string, t *app.TopUp, ledgerTx string, at time.Time) (app.Recorded, error) {
	rec := app.Recorded{Fresh: true}
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		rec = app.Recorded{Fresh: true}
		if key != "" {
			var digest *string
			if t != nil && t.NotificationDigest != "" {
				digest = &t.NotificationDigest
			}
			tag, err := tx.Exec(ctx, `insert into payout.rail_notifications (rail, notification_key, kind, reference, received_at, content_digest)
				values ($1, $2, $3, $4, $5, $6) on conflict do nothing`, rail, key, kind, reference, at, digest)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%s notification %s: %w", rail, key, app.ErrReplay)
			}
		}
		if t == nil {
			return nil
		}
		if err := tx.QueryRow(ctx, `insert into payout.rail_topups (rail, payment_id, renter_id, currency, amount, ledger_transaction_id, first_at, last_at)
			values ($1, $2, $3, $4, $5, $6, $7, $7)
			on conflict (rail, payment_id) do update set notifications = payout.rail_topups.notifications + 1, last_at = excluded.last_at
			returning notifications = 1`, t.Rail, t.PaymentID, t.RenterID, t.Currency, t.Amount, ledgerTx, at).Scan(&rec.Fresh); err != nil {
			return err
		}
		if !t.Refunded.IsPositive() {
			return nil
		}
		if t.RefundID != "" {
			return recordRefundByID(ctx, tx, key, t, at, &rec)
		}
		// Once per rise of the refunded total: Alipay notifies the total
		// so far, again on the trade's later notifications, and a retried
		// one may come after a later total (30 after 100): a total at or
		// below the highest recorded is nothing new. Recorded per distinct
		// total, the late 30 paged again, and finance taking back "the part
		// since the last one" took it twice. The upsert of rail_topups above
		// holds the trade's row: its notifications take turns here.
		var before string
		err := tx.QueryRow(ctx, `with prev as (select coalesce(max(refunded_total), 0) as total from payout.rail_refunds
				where rail = $1 and payment_id = $2)
			insert into payout.rail_refunds (rail, payment_id, refunded_total, renter_id, currency, refunded_at,
				notification_key, received_at)
			select $1, $2, $3, $4, $5, $6, $7, $8 from prev where $3 > prev.total
			on conflict do nothing
			returning (select total::text from prev)`,
			t.Rail, t.PaymentID, t.Refunded, t.RenterID, t.Currency, t.RefundedAt, key, at).Scan(&before)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		rec.Refund, rec.RefundedTotal = true, t.Refunded
		rec.RefundedBefore, err = decimal.NewFromString(before)
		return err
	})
	return rec, err
}

// recordRefundByID records one refund of a rail that notifies each refund
// on its own with that refund's amount (WeChat Pay), once per refund id:
// its row's refunded_total is the payment's total with it, the highest
// total before plus its amount, so each row is a rise as Alipay's are and
// refunded_since_last is the refund's amount. Taken as a rise of a
// notified total, a second refund of the same amount (10 after 10) was
// nothing new. The caller's upsert of rail_topups holds the payment's row:
// its refunds take turns here. The id recorded before is the rail's retry
// when its content digest is the same, ErrReplay when not.
func recordRefundByID(ctx context.Context, tx pgx.Tx, key string, t *app.TopUp, at time.Time, rec *app.Recorded) error {
	var before, total string
	err := tx.QueryRow(ctx, `with prev as (select coalesce(max(refunded_total), 0) as total from payout.rail_refunds
			where rail = $1 and payment_id = $2)
		insert into payout.rail_refunds (rail, payment_id, refunded_total, renter_id, currency, refunded_at,
			notification_key, received_at, refund_id, content_digest)
		select $1, $2, prev.total + $3, $4, $5, $6, $7, $8, $9, $10 from prev
		on conflict (rail, refund_id) do nothing
		returning (select total::text from prev), refunded_total::text`,
		t.Rail, t.PaymentID, t.Refunded, t.RenterID, t.Currency, t.RefundedAt, key, at, t.RefundID, t.RefundDigest).Scan(&before, &total)
	if errors.Is(err, pgx.ErrNoRows) {
		var payment, digest string
		if err := tx.QueryRow(ctx, `select payment_id, content_digest from payout.rail_refunds where rail = $1 and refund_id = $2`,
			t.Rail, t.RefundID).Scan(&payment, &digest); err != nil {
			return fmt.Errorf("%s refund %s recorded before: %w", t.Rail, t.RefundID, err)
		}
		if payment != t.PaymentID || digest != t.RefundDigest {
			return fmt.Errorf("%s refund %s recorded before (payment %s) with other content: %w", t.Rail, t.RefundID, payment, app.ErrReplay)
		}
		return nil
	}
	if err != nil {
		return err
	}
	rec.Refund = true
	if rec.RefundedBefore, err = decimal.NewFromString(before); err != nil {
		return err
	}
	rec.RefundedTotal, err = decimal.NewFromString(total)
	return err
}
