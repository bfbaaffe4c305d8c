package server

import (
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// wireDecoders holds the decoders DecodeWith registered, by message name.
var wireDecoders sync.Map // protoreflect.FullName → func([]byte, proto.Message) bool

// DecodeWith has the listener (textCodec) hand requests of type M to
// decode before protobuf's decoder: decode either fills the fresh message
// exactly as proto.Unmarshal would from the same bytes and returns true,
// or returns false having changed nothing, and proto.Unmarshal decodes the
// request (or refuses it). For a request type whose generated decode shows
// in profiles, where a decoder can handle its common shape with fewer
// allocations; anything unusual stays protobuf's. decode must not keep b.
func DecodeWith[M proto.Message](decode func(b []byte, m M) bool) {
	var m M
	wireDecoders.Store(m.ProtoReflect().Descriptor().FullName(), func(b []byte, v proto.Message) bool {
		t, ok := v.(M)
		return ok && decode(b, t)
	})
}

// decodeRegistered runs m's registered decoder on data, reporting whether
// it decoded m.
func decodeRegistered(data mem.BufferSlice, m proto.Message) bool {
	d, ok := wireDecoders.Load(m.ProtoReflect().Descriptor().FullName())
	if !ok {
		return false
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return d.(func([]byte, proto.Message) bool)(buf.ReadOnlyData(), m)
}
