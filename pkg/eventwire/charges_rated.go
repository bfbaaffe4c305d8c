package eventwire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of events.proto's ChargesRatedBatch (charges.rated.*: the
// ledger reads the fields of each charge it posts by hand).
const (
	RatedBatchID      protowire.Number = 1
	RatedBatchCharges protowire.Number = 2
)

// Field numbers of events.proto's RatedCharge.
const (
	RatedChargeID    protowire.Number = 1
	RatedLeaseID     protowire.Number = 2
	RatedRenterID    protowire.Number = 3
	RatedProviderID  protowire.Number = 4
	RatedCycleID     protowire.Number = 5
	RatedCurrency    protowire.Number = 6
	RatedAmount      protowire.Number = 7
	RatedExactAmount protowire.Number = 8
	RatedEventIDs    protowire.Number = 9
	RatedLines       protowire.Number = 10
	RatedEffectiveAt protowire.Number = 11
)

// Field numbers of events.proto's ChargeLine.
const (
	LineEventID    protowire.Number = 1
	LineKind       protowire.Number = 2
	LineGPUModel   protowire.Number = 3
	LineGPUCount   protowire.Number = 4
	LineBand       protowire.Number = 5
	LineTier       protowire.Number = 6
	LineRateCardID protowire.Number = 7
	LineStart      protowire.Number = 8
	LineEnd        protowire.Number = 9
	LineGPUHours   protowire.Number = 10
	LineUnitPrice  protowire.Number = 11
	LineMultiplier protowire.Number = 12
	LineAmount     protowire.Number = 13
)
