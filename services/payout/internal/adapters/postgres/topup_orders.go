package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

var _ app.TopUpOrderReader = (*Store)(nil)

// KeepTopUpOrder implements app.TopUpOrderStore. Two statements, each with
// its own snapshot: an insert that waited for another request's insert of
// the same order (the same key sent twice at once) inserts nothing, and
// only a read after it sees the row that request committed (one statement
// read it from a snapshot taken before, found nothing: a 500).
func (s *Store) KeepTopUpOrder(ctx context.Context, o app.TopUpOrder, at time.Time) (app.TopUpOrder, error) {
	if _, err := s.Pool.Exec(ctx, `insert into payout.topup_orders (order_id, renter_id, rail, currency, amount, created_at)
		values ($1, $2, $3, $4, $5, $6) on conflict (order_id) do nothing`, o.ID, o.RenterID, o.Rail, o.Currency, o.Amount, at); err != nil {
		return app.TopUpOrder{}, fmt.Errorf("keep top-up order %s: %w", o.ID, err)
	}
	kept := app.TopUpOrder{ID: o.ID}
	err := s.Pool.QueryRow(ctx, `select renter_id, rail, currency, amount, created_at from payout.topup_orders where order_id = $1`,
		o.ID).Scan(&kept.RenterID, &kept.Rail, &kept.Currency, &kept.Amount, &kept.OpenedAt)
	if err != nil {
		return app.TopUpOrder{}, fmt.Errorf("read top-up order %s: %w", o.ID, err)
	}
	return kept, nil
}

// TopUpOrder implements app.TopUpOrderReader.
func (s *Store) TopUpOrder(ctx context.Context, id string) (app.TopUpOrder, error) {
	o := app.TopUpOrder{ID: id}
	err := s.Pool.QueryRow(ctx, `select renter_id, rail, currency, amount, created_at from payout.topup_orders where order_id = $1`,
		id).Scan(&o.RenterID, &o.Rail, &o.Currency, &o.Amount, &o.OpenedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.TopUpOrder{}, fmt.Errorf("top-up order %s: %w", id, app.ErrUnknownTopUpOrder)
	}
	if err != nil {
		return app.TopUpOrder{}, fmt.Errorf("read top-up order %s: %w", id, err)
	}
	return o, nil
}

// DepositedTopUp implements app.TopUpOrderReader.
func (s *Store) DepositedTopUp(ctx context.Context, rail, paymentID string) (app.TopUpOrder, error) {
	o := app.TopUpOrder{ID: paymentID, Rail: rail}
	err := s.Pool.QueryRow(ctx, `select renter_id, currency, amount, first_at from payout.rail_topups where rail = $1 and payment_id = $2`,
		rail, paymentID).Scan(&o.RenterID, &o.Currency, &o.Amount, &o.OpenedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.TopUpOrder{}, fmt.Errorf("%s payment %s: %w", rail, paymentID, app.ErrUnknownTopUpOrder)
	}
	if err != nil {
		return app.TopUpOrder{}, fmt.Errorf("read %s payment %s: %w", rail, paymentID, err)
	}
	return o, nil
}
