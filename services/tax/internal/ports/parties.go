package ports

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/partyfeed"
	"github.com/gpubill/gpubill/pkg/split"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/tax/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// PartyConsumerName is the durable consumer of party.updated.* that keeps the
// tax profile and jurisdiction read model.
const PartyConsumerName = "tax-parties"

// ConsumeParties keeps the tax profiles until ctx ends.
func ConsumeParties(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, store *postgres.Store, log *slog.Logger) error {
	return partyfeed.ConsumeProviders(ctx, js, pool, log, postgres.Schema, PartyConsumerName, func(ctx context.Context, tx pgx.Tx, evs []*eventsv1.PartyUpdated) error {
		var rows []domain.Profile
		for _, ev := range evs {
			j := strings.ToUpper(strings.TrimSpace(ev.Jurisdiction))
			if j == "" {
				j = app.DefaultJurisdiction
			}
			profile := ev.TaxProfile
			if profile == "" {
				profile = split.ProfileIndividual
			}
			rows = append(rows, domain.Profile{ProviderID: ev.PartyId, TaxProfile: profile, Jurisdiction: j, Version: ev.Version})
		}
		if err := store.UpsertProfiles(ctx, tx, rows); err != nil {
			return fmt.Errorf("party updates: %w", err)
		}
		return nil
	})
}
