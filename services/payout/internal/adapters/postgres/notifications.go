package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

var _ app.NotificationStore = (*Store)(nil)

// NotificationSeen implements app.NotificationStore.
func (s *Store) NotificationSeen(ctx context.Context, rail, key string) (bool, error) {
	var seen bool
	err := s.Pool.QueryRow(ctx, `select exists (select 1 from payout.rail_notifications where rail = $1 and notification_key = $2)`,
		rail, key).Scan(&seen)
	return seen, err
}

// RecordNotification implements app.NotificationStore.
func (s *Store) RecordNotification(ctx context.Context, rail, key, kind, reference string, t *app.TopUp, ledgerTx string, at time.Time) (bool, error) {
	fresh := true
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		if key != "" {
			tag, err := tx.Exec(ctx, `insert into payout.rail_notifications (rail, notification_key, kind, reference, received_at)
				values ($1, $2, $3, $4, $5) on conflict do nothing`, rail, key, kind, reference, at)
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
		return tx.QueryRow(ctx, `insert into payout.rail_topups (rail, payment_id, renter_id, currency, amount, ledger_transaction_id, first_at, last_at)
			values ($1, $2, $3, $4, $5, $6, $7, $7)
			on conflict (rail, payment_id) do update set notifications = payout.rail_topups.notifications + 1, last_at = excluded.last_at
			returning notifications = 1`, t.Rail, t.PaymentID, t.RenterID, t.Currency, t.Amount, ledgerTx, at).Scan(&fresh)
	})
	return fresh, err
}
