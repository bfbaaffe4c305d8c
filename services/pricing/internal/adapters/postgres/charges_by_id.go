package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// ChargesByID reads rated charges with their lines (app.ChargeReader).
func (s *Store) ChargesByID(ctx context.Context, ids []string) ([]domain.StoredCharge, error) {
	rows, err := s.Pool.Query(ctx, `select charge_id, currency, amount, lines from pricing.charges where charge_id = any($1) order by charge_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("charges by id: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.StoredCharge, error) {
		var c domain.StoredCharge
		var raw []byte
		if err := r.Scan(&c.ID, &c.Currency, &c.Amount, &raw); err != nil {
			return c, err
		}
		var ls []line
		if err := json.Unmarshal(raw, &ls); err != nil {
			return c, fmt.Errorf("charge %s lines: %w", c.ID, err)
		}
		for _, l := range ls {
			hours, err := decimal.NewFromString(l.GPUHours)
			if err != nil {
				return c, fmt.Errorf("charge %s gpu_hours %q: %w", c.ID, l.GPUHours, err)
			}
			amt, err := decimal.NewFromString(l.Amount)
			if err != nil {
				return c, fmt.Errorf("charge %s amount %q: %w", c.ID, l.Amount, err)
			}
			c.Lines = append(c.Lines, domain.PricedLine{Kind: l.Kind, GPUModel: l.GPUModel, Band: l.Band, Tier: l.Tier,
				RateCardID: l.RateCardID, GPUHours: hours, Amount: amt})
		}
		return c, nil
	})
}
