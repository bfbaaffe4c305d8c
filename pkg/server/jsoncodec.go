package server

import (
	"sync"

	"google.golang.org/protobuf/proto"
)

// jsonDecoders and jsonEncoders hold what DecodeJSONWith and EncodeJSONWith
// registered, by message name.
var jsonDecoders, jsonEncoders sync.Map // protoreflect.FullName → func

// DecodeJSONWith has the REST gateway hand request bodies of type M to
// decode before protojson: decode either fills the message exactly as
// protojson would from the same body with the gateway's options (unknown
// fields discarded) and returns true, or returns false having changed
// nothing, and protojson decodes the body (or refuses it, naming the
// field). For a request whose reflective decode shows in profiles, where a
// decoder can take its common shape directly; anything unusual stays
// protojson's. (Or for a request that takes a body protojson refuses part
// by part: metering's ingest, whose events that do not decode are each
// rejected alone, as the service's own field says.) decode must not keep b.
func DecodeJSONWith[M proto.Message](decode func(b []byte, m M) bool) {
	var m M
	jsonDecoders.Store(m.ProtoReflect().Descriptor().FullName(), func(b []byte, v proto.Message) bool {
		t, ok := v.(M)
		return ok && decode(b, t)
	})
}

// EncodeJSONWith has the REST gateway write answers of type M with
// appendJSON before protojson: it either appends to b the JSON protojson
// writes with the gateway's options (proto field names, every field
// emitted), compact (protojson may put a space after a colon or comma) and
// returns true, or returns false, and protojson writes the answer (or
// refuses it).
func EncodeJSONWith[M proto.Message](appendJSON func(b []byte, m M) ([]byte, bool)) {
	var m M
	jsonEncoders.Store(m.ProtoReflect().Descriptor().FullName(), func(b []byte, v proto.Message) ([]byte, bool) {
		t, ok := v.(M)
		if !ok {
			return b, false
		}
		return appendJSON(b, t)
	})
}

// decodeJSONRegistered runs m's registered JSON decoder on b, reporting
// whether it decoded m.
func decodeJSONRegistered(b []byte, m proto.Message) bool {
	d, ok := jsonDecoders.Load(m.ProtoReflect().Descriptor().FullName())
	return ok && d.(func([]byte, proto.Message) bool)(b, m)
}

// encodeJSONRegistered is m's JSON by its registered encoder, if it has one
// and the encoder takes m.
func encodeJSONRegistered(m proto.Message) ([]byte, bool) {
	e, ok := jsonEncoders.Load(m.ProtoReflect().Descriptor().FullName())
	if !ok {
		return nil, false
	}
	return e.(func([]byte, proto.Message) ([]byte, bool))(nil, m)
}
