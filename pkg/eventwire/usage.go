// Package eventwire holds the field numbers of the events the pipeline
// encodes and decodes by hand with protowire (metering writes
// usage.recorded, pricing reads it; the ledger's lease control reads
// ledger.posted), so every side uses one list, checked against the
// generated descriptors (TestUsageNumbersMatchEventsProto,
// TestLedgerPostedNumbersMatchEventsProto).
package eventwire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of events.proto's UsageRecordedBatch.
const (
	UsageBatchID     protowire.Number = 1
	UsageBatchEvents protowire.Number = 2
)

// Field numbers of events.proto's UsageEvent.
const (
	UsageID           protowire.Number = 1
	UsageLeaseID      protowire.Number = 2
	UsageProviderID   protowire.Number = 3
	UsageRenterID     protowire.Number = 4
	UsageGPUModel     protowire.Number = 5
	UsageGPUCount     protowire.Number = 6
	UsageStart        protowire.Number = 7
	UsageEnd          protowire.Number = 8
	UsageRegion       protowire.Number = 9
	UsageWorkload     protowire.Number = 10
	UsageCurrency     protowire.Number = 11
	UsageProviderTier protowire.Number = 12
	UsageProviderPUE  protowire.Number = 13
	UsageCycleID      protowire.Number = 14
	UsageReceivedAt   protowire.Number = 15
)

// Field numbers of google.protobuf.Timestamp.
const (
	TimestampSeconds protowire.Number = 1
	TimestampNanos   protowire.Number = 2
)
