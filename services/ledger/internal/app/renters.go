package app

import (
	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RentersConsumer records party.updated message ids in the ledger's inbox
// (the durable consumer's name).
const RentersConsumer = "ledger-renters"

// RenterUpdate is one party.updated message for the renters' read model
// (Keep false: a provider's).
type RenterUpdate = readmodel.Update[domain.RenterLimit]

// Renters applies party.updated to the credit limits lease control reads
// (metering owns the parties): each batch's ids claimed (as RentersConsumer)
// and its fresh renters upserted in one transaction of
// adapters/postgres.RenterStore.
type Renters = readmodel.Applier[domain.RenterLimit]
