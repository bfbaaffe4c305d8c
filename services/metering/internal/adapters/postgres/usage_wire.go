package postgres

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubill/gpubill/pkg/eventwire"
)

// wireEvent is one usage.recorded event's fields, as UsageEvent carries them.
type wireEvent struct {
	id, lease, provider, renter, model string
	count                              int32
	start, end                         time.Time
	region, workload                   string
	currency, tier, pue, cycle         string
	received                           time.Time
}

// appendBatchID appends a UsageRecordedBatch's batch_id.
func appendBatchID(b []byte, id string) []byte {
	return eventwire.AppendString(b, eventwire.UsageBatchID, id)
}

// appendUsageEvent appends e as one element of a UsageRecordedBatch's
// events, byte for byte what proto.Marshal writes for it (fields in number
// order, proto3 zero values left out; TestRecordedWireMatchesProtobuf).
// scratch holds the event's body while its length is not known; the
// grown scratch is returned for the next call.
func appendUsageEvent(b, scratch []byte, e *wireEvent) ([]byte, []byte) {
	m := scratch[:0]
	m = eventwire.AppendString(m, eventwire.UsageID, e.id)
	m = eventwire.AppendString(m, eventwire.UsageLeaseID, e.lease)
	m = eventwire.AppendString(m, eventwire.UsageProviderID, e.provider)
	m = eventwire.AppendString(m, eventwire.UsageRenterID, e.renter)
	m = eventwire.AppendString(m, eventwire.UsageGPUModel, e.model)
	if e.count != 0 {
		m = protowire.AppendTag(m, eventwire.UsageGPUCount, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(int64(e.count)))
	}
	m = eventwire.AppendTimestamp(m, eventwire.UsageStart, e.start)
	m = eventwire.AppendTimestamp(m, eventwire.UsageEnd, e.end)
	m = eventwire.AppendString(m, eventwire.UsageRegion, e.region)
	m = eventwire.AppendString(m, eventwire.UsageWorkload, e.workload)
	m = eventwire.AppendString(m, eventwire.UsageCurrency, e.currency)
	m = eventwire.AppendString(m, eventwire.UsageProviderTier, e.tier)
	m = eventwire.AppendString(m, eventwire.UsageProviderPUE, e.pue)
	m = eventwire.AppendString(m, eventwire.UsageCycleID, e.cycle)
	m = eventwire.AppendTimestamp(m, eventwire.UsageReceivedAt, e.received)
	b = protowire.AppendTag(b, eventwire.UsageBatchEvents, protowire.BytesType)
	return protowire.AppendBytes(b, m), m
}
