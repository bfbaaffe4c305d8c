package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// ProviderTiers is pricing's read model of the providers' tiers.
type ProviderTiers struct{ Pool *pgxpool.Pool }

var _ app.TierReader = (*ProviderTiers)(nil)

// PartyStore is the read model's store: pricing's inbox and UpsertTiers in
// one transaction.
func (p *ProviderTiers) PartyStore() outbox.ReadModelStore[domain.ProviderTier] {
	return outbox.ReadModelStore[domain.ProviderTier]{Pool: p.Pool, Schema: Schema, Upsert: p.UpsertTiers}
}

// UpsertTiers applies party updates inside tx, newer versions winning (one
// statement a row: a batch may name a provider twice).
func (p *ProviderTiers) UpsertTiers(ctx context.Context, tx pgx.Tx, rows []domain.ProviderTier) error {
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(`insert into pricing.provider_tiers (provider_id, tier, version) values ($1, $2, $3)
			on conflict (provider_id) do update set tier = excluded.tier, version = excluded.version, updated_at = now()
			where pricing.provider_tiers.version <= excluded.version`, r.ProviderID, r.Tier, r.Version)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d provider tiers: %w", len(rows), err)
	}
	return nil
}

// Tier implements app.TierReader.
func (p *ProviderTiers) Tier(ctx context.Context, provider string) (string, bool, error) {
	var tier string
	err := p.Pool.QueryRow(ctx, `select tier from pricing.provider_tiers where provider_id = $1`, provider).Scan(&tier)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("tier of %s: %w", provider, err)
	}
	return tier, true, nil
}
