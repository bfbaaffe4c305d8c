package ports

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/eventwire"
	"github.com/gpubill/gpubill/pkg/server"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// Field numbers of IngestUsageEventsRequest and UsageEventInput
// (metering.proto; TestIngestFieldNumbersMatchTheProto holds them to the
// descriptors).
const (
	ingestEvents protowire.Number = 1

	inputID         protowire.Number = 1
	inputLeaseID    protowire.Number = 2
	inputProviderID protowire.Number = 3
	inputRenterID   protowire.Number = 4
	inputGPUModel   protowire.Number = 5
	inputGPUCount   protowire.Number = 6
	inputStartTime  protowire.Number = 7
	inputEndTime    protowire.Number = 8
	inputRegion     protowire.Number = 9
	inputWorkload   protowire.Number = 10
	inputMalformed  protowire.Number = 11
)

func init() { server.DecodeWith(decodeIngestRequest) }

// decodeIngestRequest decodes an ingest request as proto.Unmarshal would,
// when it holds only the fields metering knows, each with its own wire
// type and valid UTF-8: the events in one allocation (where the generated
// decode makes one per event), an id and a lease id per event, and one
// string per distinct value of the other fields (the same parties, model,
// region, workload and times recur through a batch). Anything else (an
// unknown field, a field of another wire type, invalid UTF-8, truncated
// data) returns false with r unchanged, and protobuf decodes or refuses
// the request (server.DecodeWith). TestDecodeIngestRequestIsProtoUnmarshal
// holds it to the generated decode.
func decodeIngestRequest(b []byte, r *meteringv1.IngestUsageEventsRequest) bool {
	n := 0
	for rest := b; len(rest) > 0; n++ {
		num, typ, k := protowire.ConsumeTag(rest)
		if k < 0 || num != ingestEvents || typ != protowire.BytesType {
			return false
		}
		rest = rest[k:]
		if k = protowire.ConsumeFieldValue(num, typ, rest); k < 0 {
			return false
		}
		rest = rest[k:]
	}
	if n == 0 {
		proto.Reset(r) // no events: proto.Unmarshal leaves the request empty too
		return true
	}
	evs := make([]meteringv1.UsageEventInput, n)
	ptrs := make([]*meteringv1.UsageEventInput, n)
	in := eventwire.NewInterner()
	for i := range evs {
		_, _, k := protowire.ConsumeTag(b) // checked above
		v, m := protowire.ConsumeBytes(b[k:])
		b = b[k+m:]
		if !decodeEventInput(v, &evs[i], in) {
			return false
		}
		ptrs[i] = &evs[i]
	}
	proto.Reset(r) // as proto.Unmarshal does before it decodes
	r.Events = ptrs
	return true
}

// inputText is where text field num of e goes; nil for any other field.
func inputText(e *meteringv1.UsageEventInput, num protowire.Number) *string {
	switch num {
	case inputID:
		return &e.Id
	case inputLeaseID:
		return &e.LeaseId
	case inputProviderID:
		return &e.ProviderId
	case inputRenterID:
		return &e.RenterId
	case inputGPUModel:
		return &e.GpuModel
	case inputStartTime:
		return &e.StartTime
	case inputEndTime:
		return &e.EndTime
	case inputRegion:
		return &e.Region
	case inputWorkload:
		return &e.Workload
	case inputMalformed:
		return &e.Malformed
	}
	return nil
}

// decodeEventInput decodes one UsageEventInput into e (false for anything
// decodeIngestRequest leaves to protobuf). A field seen twice keeps its
// last value, as protobuf does.
func decodeEventInput(b []byte, e *meteringv1.UsageEventInput, in *eventwire.Interner) bool {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false
		}
		b = b[k:]
		if num == inputGPUCount {
			if typ != protowire.VarintType {
				return false
			}
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return false
			}
			e.GpuCount = int32(v) //nolint:gosec // protobuf's int32 decoding: the low 32 bits
			b = b[k:]
			continue
		}
		dst := inputText(e, num)
		if dst == nil || typ != protowire.BytesType {
			return false
		}
		v, k := protowire.ConsumeBytes(b)
		if k < 0 {
			return false
		}
		b = b[k:]
		if num == inputID || num == inputLeaseID { // one per event (or lease): not worth a map entry
			if !utf8.Valid(v) {
				return false
			}
			*dst = string(v)
			continue
		}
		s, ok := in.Get(num, v)
		if !ok {
			return false
		}
		*dst = s
	}
	return true
}
