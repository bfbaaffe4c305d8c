package eventwire

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// AppendString appends a proto3 string field as proto.Marshal writes it;
// "" is left out.
func AppendString(b []byte, f protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, f, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// AppendTimestamp appends t as a google.protobuf.Timestamp field, as
// timestamppb.New(t) marshals (always present, even for the zero time).
func AppendTimestamp(b []byte, f protowire.Number, t time.Time) []byte {
	secs, nanos := t.Unix(), int64(t.Nanosecond())
	n := 0
	if secs != 0 {
		n += protowire.SizeTag(TimestampSeconds) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += protowire.SizeTag(TimestampNanos) + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, f, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if secs != 0 {
		b = protowire.AppendTag(b, TimestampSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, TimestampNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
}
