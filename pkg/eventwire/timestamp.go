package eventwire

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Timestamp is a google.protobuf.Timestamp read from the wire by hand (the
// decoders of usage.recorded in pricing and of charges.rated in the ledger).
// Occurrences of one field merge, as in proto.Unmarshal.
type Timestamp struct {
	Seen    bool
	Seconds int64
	Nanos   int32
}

// Merge reads one occurrence's bytes into t: its seconds and nanos, the last
// of each winning; any other field is checked and skipped.
func (t *Timestamp) Merge(b []byte) error {
	t.Seen = true
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == TimestampSeconds || num == TimestampNanos) {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if num == TimestampSeconds {
				t.Seconds = int64(v) //nolint:gosec // protobuf's int64 decoding
			} else {
				t.Nanos = int32(v) //nolint:gosec // protobuf's int32 decoding: the low 32 bits
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// Time is Timestamp.AsTime.
func (t Timestamp) Time() time.Time { return time.Unix(t.Seconds, int64(t.Nanos)).UTC() }
