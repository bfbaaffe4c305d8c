package ports

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/partyfeed"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// PartyConsumerName is the durable consumer of party.updated.* that keeps
// the provider-tier read model quotes split by.
const PartyConsumerName = app.PartyConsumer

// ConsumeParties keeps pricing's provider tiers until ctx ends, keeping
// what settlement keeps of each event (its ports.ConsumeParties); what
// cannot be decoded or applied goes to dl.
func ConsumeParties(ctx context.Context, js jetstream.JetStream, log *slog.Logger, tiers *app.ProviderTiers, dl natsx.DeadLetters) error {
	return partyfeed.Consume(ctx, js, log, PartyConsumerName, dl, func(ctx context.Context, ids []string, evs []*eventsv1.PartyUpdated) error {
		ups := make([]app.TierUpdate, len(evs))
		for i, ev := range evs {
			ups[i] = app.TierUpdate{ID: ids[i], Keep: partyfeed.IsProvider(ev) && ev.Tier != "",
				Row: domain.ProviderTier{ProviderID: ev.PartyId, Tier: ev.Tier, Version: ev.Version}}
		}
		return tiers.Apply(ctx, ups)
	})
}
