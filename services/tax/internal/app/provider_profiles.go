package app

import (
	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// PartyConsumer is the durable consumer of party.updated.* that keeps the
// tax profiles (its dead letters hold an update that could not be applied).
const PartyConsumer = "tax-parties"

// ProfileUpdate is one party.updated message for the tax-profile read model
// (Keep false: a renter's).
type ProfileUpdate = readmodel.Update[domain.Profile]

// ProviderProfiles applies party.updated to the profiles withholding reads
// (metering owns the parties): each batch's ids claimed and its fresh
// profiles upserted in one transaction of adapters/postgres.Store.PartyStore.
type ProviderProfiles = readmodel.Applier[domain.Profile]
