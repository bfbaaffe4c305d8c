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
	return appendString(b, eventwire.UsageBatchID, id)
}

// appendUsageEvent appends e as one element of a UsageRecordedBatch's
// events, byte for byte what proto.Marshal writes for it (fields in number
// order, proto3 zero values left out; TestRecordedWireMatchesProtobuf).
// scratch holds the event's body while its length is not known; the
// grown scratch is returned for the next call.
func appendUsageEvent(b, scratch []byte, e *wireEvent) ([]byte, []byte) {
	m := scratch[:0]
	m = appendString(m, eventwire.UsageID, e.id)
	m = appendString(m, eventwire.UsageLeaseID, e.lease)
	m = appendString(m, eventwire.UsageProviderID, e.provider)
	m = appendString(m, eventwire.UsageRenterID, e.renter)
	m = appendString(m, eventwire.UsageGPUModel, e.model)
	if e.count != 0 {
		m = protowire.AppendTag(m, eventwire.UsageGPUCount, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(int64(e.count)))
	}
	m = appendTimestamp(m, eventwire.UsageStart, e.start)
	m = appendTimestamp(m, eventwire.UsageEnd, e.end)
	m = appendString(m, eventwire.UsageRegion, e.region)
	m = appendString(m, eventwire.UsageWorkload, e.workload)
	m = appendString(m, eventwire.UsageCurrency, e.currency)
	m = appendString(m, eventwire.UsageProviderTier, e.tier)
	m = appendString(m, eventwire.UsageProviderPUE, e.pue)
	m = appendString(m, eventwire.UsageCycleID, e.cycle)
	m = appendTimestamp(m, eventwire.UsageReceivedAt, e.received)
	b = protowire.AppendTag(b, eventwire.UsageBatchEvents, protowire.BytesType)
	return protowire.AppendBytes(b, m), m
}

// appendString appends a proto3 string field; "" is left out.
func appendString(b []byte, f protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, f, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendTimestamp appends t as a google.protobuf.Timestamp field, as
// timestamppb.New(t) marshals (always present, even for the zero time).
func appendTimestamp(b []byte, f protowire.Number, t time.Time) []byte {
	secs, nanos := t.Unix(), int64(t.Nanosecond())
	n := 0
	if secs != 0 {
		n += protowire.SizeTag(eventwire.TimestampSeconds) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += protowire.SizeTag(eventwire.TimestampNanos) + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, f, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if secs != 0 {
		b = protowire.AppendTag(b, eventwire.TimestampSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, eventwire.TimestampNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
}
