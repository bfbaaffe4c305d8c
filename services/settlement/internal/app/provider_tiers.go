package app

import (
	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// TierUpdate is one party.updated message for the provider-tier read model
// (Keep false: a renter's, or a provider's without a tier).
type TierUpdate = readmodel.Update[domain.ProviderTier]

// ProviderTiers applies party.updated to the tiers settlement splits with
// (metering owns the parties): each batch's ids claimed and its fresh tiers
// upserted in one transaction of adapters/postgres.Store.PartyStore.
type ProviderTiers = readmodel.Applier[domain.ProviderTier]
