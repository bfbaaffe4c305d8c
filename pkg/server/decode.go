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

// requestLimit is what LimitWith registered for a message type.
type requestLimit struct{ wire, json func(b []byte) error }

// requestLimits holds what LimitWith registered, by message name.
var requestLimits sync.Map // protoreflect.FullName → requestLimit

// LimitWith has the listener and the REST gateway check a request of type
// M before decoding it: wire checks its protobuf bytes, json its JSON body
// (either may be nil). A check that fails leaves the request undecoded and
// empty, and the call is answered the check's error (an apperr error: a
// 400 naming the field) once the guard has passed the caller (sizeLimit):
// a caller without a token still gets a 401, and no decoder, copy or
// handler sees the request. For a request whose cost to decode grows with
// its count of elements rather than its bytes: 8 MiB of `{},` is 2.8
// million usage events, 1.4 GB and 13 s of CPU decoded. A check must cost
// O(len(b)), allocate nothing per element, and not keep b.
//
// The gateway's refusals are answered by the in-process channel it calls
// (localChannel); a route of such a request must reach it from the body's
// decoding (no path parameter to fail on in between).
func LimitWith[M proto.Message](wire, json func(b []byte) error) {
	var m M
	requestLimits.Store(m.ProtoReflect().Descriptor().FullName(), requestLimit{wire: wire, json: json})
}

// limitOf is m's registered limit.
func limitOf(m proto.Message) requestLimit {
	l, _ := requestLimits.Load(m.ProtoReflect().Descriptor().FullName())
	lim, _ := l.(requestLimit)
	return lim
}

// refused holds the requests a LimitWith check refused, with its error,
// until sizeLimit answers them; forgetText (on the listener) and
// localChannel.Invoke (for the gateway) drop them whatever happens to the
// call.
var refused sync.Map // request (a pointer) → error

// refuse notes m as refused with err.
func refuse(m proto.Message, err error) {
	if err != nil {
		refused.Store(m, err)
	}
}

// refusal takes the error a LimitWith check refused req with; nil when
// none did.
func refusal(req any) error {
	v, ok := refused.LoadAndDelete(req)
	if !ok {
		return nil
	}
	err, _ := v.(error)
	return err
}

// decodeRegistered runs m's registered limit and decoder on data: err is
// the limit's refusal (m is then left as it is), decoded whether the
// decoder decoded m.
func decodeRegistered(data mem.BufferSlice, m proto.Message) (decoded bool, err error) {
	d, hasDecoder := wireDecoders.Load(m.ProtoReflect().Descriptor().FullName())
	limit := limitOf(m).wire
	if !hasDecoder && limit == nil {
		return false, nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if limit != nil {
		if err = limit(b); err != nil {
			return false, err
		}
	}
	return hasDecoder && d.(func([]byte, proto.Message) bool)(b, m), nil
}
