package app

import (
	"context"

	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// PartyConsumer is the durable consumer of party.updated.* that keeps the
// provider tiers quotes split by (its dead letters hold an update that
// could not be applied).
const PartyConsumer = "pricing-parties"

// TierUpdate is one party.updated message for the provider-tier read model
// (Keep false: a renter's, or a provider's without a tier), as settlement
// keeps its own.
type TierUpdate = readmodel.Update[domain.ProviderTier]

// ProviderTiers applies party.updated to the tiers quotes read (metering
// owns the parties): each batch's ids claimed and its fresh tiers upserted
// in one transaction of adapters/postgres.ProviderTiers.PartyStore.
type ProviderTiers = readmodel.Applier[domain.ProviderTier]

// TierReader is the provider-tier read model.
type TierReader interface {
	// Tier returns the provider's tier; ok is false when no party.updated
	// has named one.
	Tier(ctx context.Context, provider string) (tier string, ok bool, err error)
}
