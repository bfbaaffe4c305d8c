package ports

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubill/gpubill/pkg/eventwire"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// eventsPerBatchHint sizes a batch's event slice before its events are
// counted (metering's messages carry about a hundred).
const eventsPerBatchHint = 128

var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

// decodeUsageBatch decodes a UsageRecordedBatch straight into domain
// events, as proto.Unmarshal into eventsv1.UsageRecordedBatch followed by
// usageEvent would (the same result and the same refusals: malformed wire
// data, invalid UTF-8 in a string field), without the generated messages
// and their timestamps, and with repeated strings shared through in.
func decodeUsageBatch(b []byte, in *eventwire.Interner) ([]domain.UsageEvent, error) {
	out := make([]domain.UsageEvent, 0, eventsPerBatchHint)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == eventwire.UsageBatchID && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			if !utf8.Valid(v) {
				return nil, fmt.Errorf("batch_id: %w", errInvalidUTF8)
			}
			b = b[n:]
		case num == eventwire.UsageBatchEvents && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			var ev domain.UsageEvent
			if err := decodeUsageEvent(v, in, &ev); err != nil {
				return nil, fmt.Errorf("events[%d]: %w", len(out), err)
			}
			out = append(out, ev)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return out, nil
}

// eventDecoder is one UsageEvent being decoded.
type eventDecoder struct {
	ev                   *domain.UsageEvent
	start, end, received eventwire.Timestamp
}

// target is where field num goes: a string (unique: never shared through
// the interner) or a timestamp; neither for any other field.
func (d *eventDecoder) target(num protowire.Number) (str *string, unique bool, ts *eventwire.Timestamp) {
	ev := d.ev
	switch num {
	case eventwire.UsageID:
		return &ev.ID, true, nil
	case eventwire.UsageLeaseID:
		return &ev.LeaseID, false, nil
	case eventwire.UsageProviderID:
		return &ev.ProviderID, false, nil
	case eventwire.UsageRenterID:
		return &ev.RenterID, false, nil
	case eventwire.UsageGPUModel:
		return &ev.GPUModel, false, nil
	case eventwire.UsageRegion:
		return &ev.Region, false, nil
	case eventwire.UsageWorkload:
		return &ev.Workload, false, nil
	case eventwire.UsageCurrency:
		return &ev.Currency, false, nil
	case eventwire.UsageProviderTier:
		return &ev.ProviderTier, false, nil
	case eventwire.UsageProviderPUE:
		return &ev.ProviderPUE, false, nil
	case eventwire.UsageCycleID:
		return &ev.CycleID, false, nil
	case eventwire.UsageStart:
		return nil, false, &d.start
	case eventwire.UsageEnd:
		return nil, false, &d.end
	case eventwire.UsageReceivedAt:
		return nil, false, &d.received
	}
	return nil, false, nil
}

// decodeUsageEvent decodes one UsageEvent into ev. A field seen twice keeps
// its last value, and a timestamp seen twice is merged, as protobuf does;
// start and end read as the Unix epoch when absent (Timestamp.AsTime of
// nil), received_at as the zero time.
func decodeUsageEvent(b []byte, in *eventwire.Interner, ev *domain.UsageEvent) error {
	d := eventDecoder{ev: ev}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		str, unique, ts := d.target(num)
		switch {
		case str != nil && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			var valid bool
			if unique {
				if valid = utf8.Valid(v); valid {
					*str = string(v)
				}
			} else {
				*str, valid = in.Get(num, v)
			}
			if !valid {
				return fmt.Errorf("field %d: %w", num, errInvalidUTF8)
			}
			b = b[n:]
		case ts != nil && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if err := ts.Merge(v); err != nil {
				return fmt.Errorf("field %d: %w", num, err)
			}
			b = b[n:]
		case num == eventwire.UsageGPUCount && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			ev.GPUCount = int32(v) //nolint:gosec // protobuf's int32 decoding: the low 32 bits
			b = b[n:]
		default: // unknown, or a known field with another wire type: skipped, as protobuf keeps it unknown
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	ev.Start, ev.End = d.start.Time(), d.end.Time()
	if d.received.Seen {
		ev.ReceivedAt = d.received.Time()
	}
	return nil
}
