package ports

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/partyfeed"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// PartyConsumerName is the durable consumer of party.updated.* that keeps the
// provider tier read model.
const PartyConsumerName = "settlement-parties"

// ConsumeParties keeps settlement's provider tiers until ctx ends.
func ConsumeParties(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, store *postgres.Store, log *slog.Logger) error {
	return partyfeed.ConsumeProviders(ctx, js, pool, log, postgres.Schema, PartyConsumerName, func(ctx context.Context, tx pgx.Tx, evs []*eventsv1.PartyUpdated) error {
		var rows []domain.ProviderTier
		for _, ev := range evs {
			if ev.Tier == "" {
				continue
			}
			rows = append(rows, domain.ProviderTier{ProviderID: ev.PartyId, Tier: ev.Tier, Version: ev.Version})
		}
		if err := store.UpsertTiers(ctx, tx, rows); err != nil {
			return fmt.Errorf("party updates: %w", err)
		}
		return nil
	})
}
