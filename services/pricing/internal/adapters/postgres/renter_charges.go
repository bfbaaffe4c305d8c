package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// RenterCharges reads rated charges for renters.
type RenterCharges struct{ Pool *pgxpool.Pool }

// List returns a renter's charges (of one lease, when lease is not ""),
// newest effective_at first, after the cursor (zero = from the newest).
func (r *RenterCharges) List(ctx context.Context, renter, lease string, afterAt time.Time, afterID string, limit int) ([]domain.RenterCharge, error) {
	var after *time.Time
	if !afterAt.IsZero() {
		after = &afterAt
	}
	rows, err := r.Pool.Query(ctx, `select charge_id, lease_id, renter_id, provider_id, cycle_id, currency, amount, exact_amount,
			effective_at, lines
		from pricing.charges
		where renter_id = $1 and ($2 = '' or lease_id = $2) and ($3::timestamptz is null or (effective_at, charge_id) < ($3, $4))
		order by effective_at desc, charge_id desc limit $5`, renter, lease, after, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("renter charges: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.RenterCharge, error) {
		var c domain.RenterCharge
		var raw []byte
		if err := row.Scan(&c.ChargeID, &c.LeaseID, &c.RenterID, &c.ProviderID, &c.CycleID, &c.Currency, &c.Amount, &c.ExactAmount,
			&c.EffectiveAt, &raw); err != nil {
			return c, err
		}
		var lines []line
		if err := json.Unmarshal(raw, &lines); err != nil {
			return c, fmt.Errorf("charge %s lines: %w", c.ChargeID, err)
		}
		for _, l := range lines {
			start, err1 := time.Parse(time.RFC3339Nano, l.Start)
			end, err2 := time.Parse(time.RFC3339Nano, l.End)
			if err1 != nil || err2 != nil {
				return c, fmt.Errorf("charge %s line times %q %q", c.ChargeID, l.Start, l.End)
			}
			c.Lines = append(c.Lines, domain.RenterChargeLine{Kind: l.Kind, GPUModel: l.GPUModel, GPUCount: l.GPUCount, Band: l.Band,
				Tier: l.Tier, RateCardID: l.RateCardID, Start: start, End: end, GPUHours: l.GPUHours, UnitPrice: l.UnitPrice,
				Multiplier: l.Multiplier, AmountDec: l.Amount})
		}
		return c, nil
	})
}
