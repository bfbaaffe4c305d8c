package ports

import (
	"context"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/partyfeed"
	"github.com/gpubill/gpubill/pkg/split"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// PartyConsumerName is the durable consumer of party.updated.* that keeps the
// tax profile and jurisdiction read model.
const PartyConsumerName = app.PartyConsumer

// ConsumeParties keeps the tax profiles until ctx ends; what cannot be
// decoded or applied goes to dl.
func ConsumeParties(ctx context.Context, js jetstream.JetStream, log *slog.Logger, profiles *app.ProviderProfiles, dl natsx.DeadLetters) error {
	return partyfeed.Consume(ctx, js, log, PartyConsumerName, dl, func(ctx context.Context, ids []string, evs []*eventsv1.PartyUpdated) error {
		ups := make([]app.ProfileUpdate, len(evs))
		for i, ev := range evs {
			ups[i] = app.ProfileUpdate{ID: ids[i], Keep: partyfeed.IsProvider(ev), Row: profile(ev)}
		}
		return profiles.Apply(ctx, ups)
	})
}

// profile is a provider's tax profile as party.updated announces it: no
// jurisdiction is app.DefaultJurisdiction's, no profile an individual's.
func profile(ev *eventsv1.PartyUpdated) domain.Profile {
	j := strings.ToUpper(strings.TrimSpace(ev.Jurisdiction))
	if j == "" {
		j = app.DefaultJurisdiction
	}
	profile := ev.TaxProfile
	if profile == "" {
		profile = split.ProfileIndividual
	}
	return domain.Profile{ProviderID: ev.PartyId, TaxProfile: profile, Jurisdiction: j, Version: ev.Version}
}
