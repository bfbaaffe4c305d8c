package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// KeepTopUpOrder implements app.TopUpOrderStore.
func (s *Store) KeepTopUpOrder(ctx context.Context, o app.TopUpOrder, at time.Time) (app.TopUpOrder, error) {
	kept := app.TopUpOrder{ID: o.ID}
	err := s.Pool.QueryRow(ctx, `with ins as (
			insert into payout.topup_orders (order_id, renter_id, rail, currency, amount, created_at)
			values ($1, $2, $3, $4, $5, $6) on conflict (order_id) do nothing
			returning renter_id, rail, currency, amount)
		select renter_id, rail, currency, amount from ins
		union all select renter_id, rail, currency, amount from payout.topup_orders where order_id = $1 and not exists (select from ins)`,
		o.ID, o.RenterID, o.Rail, o.Currency, o.Amount, at).Scan(&kept.RenterID, &kept.Rail, &kept.Currency, &kept.Amount)
	if err != nil {
		return app.TopUpOrder{}, fmt.Errorf("keep top-up order %s: %w", o.ID, err)
	}
	return kept, nil
}
