package postgres

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of events.proto's UsageRecordedBatch, UsageEvent and
// google.protobuf.Timestamp that appendUsageEvent writes.
const (
	batchFieldID     protowire.Number = 1
	batchFieldEvents protowire.Number = 2

	evFieldID           protowire.Number = 1
	evFieldLeaseID      protowire.Number = 2
	evFieldProviderID   protowire.Number = 3
	evFieldRenterID     protowire.Number = 4
	evFieldGPUModel     protowire.Number = 5
	evFieldGPUCount     protowire.Number = 6
	evFieldStart        protowire.Number = 7
	evFieldEnd          protowire.Number = 8
	evFieldRegion       protowire.Number = 9
	evFieldWorkload     protowire.Number = 10
	evFieldCurrency     protowire.Number = 11
	evFieldProviderTier protowire.Number = 12
	evFieldProviderPUE  protowire.Number = 13
	evFieldCycleID      protowire.Number = 14
	evFieldReceivedAt   protowire.Number = 15

	tsFieldSeconds protowire.Number = 1
	tsFieldNanos   protowire.Number = 2
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
	return appendString(b, batchFieldID, id)
}

// appendUsageEvent appends e as one element of a UsageRecordedBatch's
// events, byte for byte what proto.Marshal writes for it (fields in number
// order, proto3 zero values left out; TestRecordedWireMatchesProtobuf).
// scratch holds the event's body while its length is not known; the
// grown scratch is returned for the next call.
func appendUsageEvent(b, scratch []byte, e *wireEvent) ([]byte, []byte) {
	m := scratch[:0]
	m = appendString(m, evFieldID, e.id)
	m = appendString(m, evFieldLeaseID, e.lease)
	m = appendString(m, evFieldProviderID, e.provider)
	m = appendString(m, evFieldRenterID, e.renter)
	m = appendString(m, evFieldGPUModel, e.model)
	if e.count != 0 {
		m = protowire.AppendTag(m, evFieldGPUCount, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(int64(e.count)))
	}
	m = appendTimestamp(m, evFieldStart, e.start)
	m = appendTimestamp(m, evFieldEnd, e.end)
	m = appendString(m, evFieldRegion, e.region)
	m = appendString(m, evFieldWorkload, e.workload)
	m = appendString(m, evFieldCurrency, e.currency)
	m = appendString(m, evFieldProviderTier, e.tier)
	m = appendString(m, evFieldProviderPUE, e.pue)
	m = appendString(m, evFieldCycleID, e.cycle)
	m = appendTimestamp(m, evFieldReceivedAt, e.received)
	b = protowire.AppendTag(b, batchFieldEvents, protowire.BytesType)
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
		n += protowire.SizeTag(tsFieldSeconds) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += protowire.SizeTag(tsFieldNanos) + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, f, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if secs != 0 {
		b = protowire.AppendTag(b, tsFieldSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, tsFieldNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
}
