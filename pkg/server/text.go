package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// checkText refuses a request with a NUL byte or invalid UTF-8 in any text
// field, at any depth (repeated fields and map keys and values included):
// PostgreSQL cannot store a NUL in text, and protobuf cannot carry invalid
// UTF-8, so either would otherwise fail deep inside as an internal error.
// The violation names the field as the JSON body does ("postings[1].account").
func checkText(m proto.Message) error {
	textWalks.Add(1)
	w := &textWalker{path: make([]pathSeg, 0, 8)}
	w.visitFn = w.visit
	w.walk(m.ProtoReflect())
	return w.v.Err()
}

// textWalks counts checkText's walks (the tests of textCodec read it).
var textWalks atomic.Int64

// violationsMax bounds the violations one request reports.
const violationsMax = 20

// pathSeg is one step of a field's path: a field name, then an index into
// a list or a key into a map when the field is one.
type pathSeg struct {
	name  string
	kind  segKind
	index int
	key   string
}

type segKind uint8

const (
	segField segKind = iota
	segIndex
	segKey
)

// textWalker walks a message's text fields keeping the path as segments,
// rendered only for a violation: an ingest request has thousands of list
// elements, and naming each one up front cost more than checking it.
type textWalker struct {
	path    []pathSeg
	v       apperr.Validator
	visitFn func(protoreflect.FieldDescriptor, protoreflect.Value) bool // w.visit, made once
}

func (w *textWalker) walk(m protoreflect.Message) { m.Range(w.visitFn) }

// visit checks one populated field of a message. A plain text field (most
// of them) is checked without stepping the path, which is stepped only to
// name a violation: an ingest request has ten text fields per event, and
// the path's steps (a string each, written under the collector's write
// barrier) cost more than the checks.
func (w *textWalker) visit(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
	if fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap() {
		if s := val.String(); !textOK(s) {
			w.path = append(w.path, pathSeg{name: string(fd.Name())})
			w.text(s, "")
			w.path = w.path[:len(w.path)-1]
		}
		return w.v.Len() < violationsMax
	}
	w.path = append(w.path, pathSeg{name: string(fd.Name())})
	top := len(w.path) - 1
	switch {
	case fd.IsMap():
		val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			key := k.String()
			if fd.MapKey().Kind() == protoreflect.StringKind {
				w.path[top].kind = segField // a key is named by its map field
				w.text(key, " key")
			}
			w.path[top].kind, w.path[top].key = segKey, key
			w.value(fd.MapValue(), mv)
			return true
		})
	case fd.IsList():
		l := val.List()
		for i := 0; i < l.Len(); i++ {
			w.path[top].kind, w.path[top].index = segIndex, i
			w.value(fd, l.Get(i))
		}
	default:
		w.value(fd, val)
	}
	w.path = w.path[:top]
	return w.v.Len() < violationsMax
}

func (w *textWalker) value(fd protoreflect.FieldDescriptor, val protoreflect.Value) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		w.text(val.String(), "")
	case protoreflect.MessageKind, protoreflect.GroupKind:
		w.walk(val.Message())
	}
}

// textOK reports whether s is what text accepts: valid UTF-8 without a NUL.
func textOK(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// text checks one string; suffix follows the field's name in a violation.
func (w *textWalker) text(s, suffix string) {
	switch {
	case !utf8.ValidString(s):
		w.v.Add(w.name()+suffix, "is not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		w.v.Add(w.name()+suffix, "contains a NUL byte")
	}
}

// name renders the current path as the JSON body names it.
func (w *textWalker) name() string {
	var b strings.Builder
	for i, p := range w.path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p.name)
		switch p.kind {
		case segIndex:
			fmt.Fprintf(&b, "[%d]", p.index)
		case segKey:
			fmt.Fprintf(&b, "[%q]", strings.ToValidUTF8(p.key, "\uFFFD"))
		}
	}
	return b.String()
}

// textGuard applies checkText to every request the gRPC listener receives
// that textCodec did not find clean; the gateway's calls are checked before
// the chain (localChannel.Invoke).
func textGuard() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok && p == localPeer {
			return handler(ctx, req) // the gateway's call: localChannel checked it
		}
		if _, clean := cleanText.LoadAndDelete(req); clean {
			return handler(ctx, req)
		}
		if m, ok := req.(proto.Message); ok {
			if err := checkText(m); err != nil {
				return nil, apperr.ToStatus(err)
			}
		}
		return handler(ctx, req)
	}
}

// cleanText holds the requests textCodec decoded from bytes without a zero
// byte, until textGuard takes them (forgetText drops those a call refused
// before textGuard, and the messages of streams).
var cleanText sync.Map

// textCodec is the listener's codec: protobuf's, noting which requests
// cannot hold a NUL or invalid UTF-8 so that textGuard need not walk them.
// A string's bytes are on the wire as they are, so a request whose bytes
// hold no zero byte holds no NUL in any text field, and decoding checks
// the UTF-8 of every text field of a proto3 message. Other zero bytes (an
// empty nested message, a zero in a fixed-width number) only send the
// request to the walk. The walk was a fifth of the ingest API's CPU per
// event: the pipeline's test process spent 1.0 µs per event in it, beside
// 1.1 µs decoding the requests.
type textCodec struct{ encoding.CodecV2 }

func newTextCodec() textCodec { return textCodec{encoding.GetCodecV2(protocodec.Name)} }

func (c textCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	decoded := false
	if ok {
		// The listener takes the largest limit's messages (a bank
		// statement's): any other type over its own is left undecoded.
		if limit := msgBytesMax(m); data.Len() > limit {
			refuse(m, msgTooLarge(limit)) // sizeLimit answers it once the guard has passed the call
			return nil
		}
		var err error
		if decoded, err = decodeRegistered(data, m); err != nil {
			refuse(m, err) // left empty: sizeLimit answers err once the guard has passed the call
			return nil
		}
	}
	if !decoded {
		if err := c.CodecV2.Unmarshal(data, v); err != nil {
			return err
		}
	}
	if !ok || !decodeChecksText(m.ProtoReflect().Descriptor()) {
		return nil
	}
	for _, b := range data {
		if bytes.IndexByte(b.ReadOnlyData(), 0) >= 0 {
			return nil
		}
	}
	cleanText.Store(v, struct{}{})
	return nil
}

// forgetText is the listener's first interceptor: whatever happens to a
// call, its request is not left in cleanText (nor in refused).
func forgetText() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		defer cleanText.Delete(req)
		defer refused.Delete(req)
		return handler(ctx, req)
	}
}

// forgetStreamText drops the messages a stream receives from cleanText
// (textGuard sees unary calls only).
func forgetStreamText() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, forgettingStream{ss})
	}
}

type forgettingStream struct{ grpc.ServerStream }

func (s forgettingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	cleanText.Delete(m)
	refused.Delete(m)
	return err
}

// decodeChecks caches decodeChecksText by message name.
var decodeChecks sync.Map

// decodeChecksText reports whether decoding md checks the UTF-8 of every
// text field in it: md and every message type it holds are proto3.
func decodeChecksText(md protoreflect.MessageDescriptor) bool {
	if v, ok := decodeChecks.Load(md.FullName()); ok {
		return v.(bool)
	}
	ok := allProto3(md, map[protoreflect.FullName]bool{})
	decodeChecks.Store(md.FullName(), ok)
	return ok
}

func allProto3(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return true
	}
	seen[md.FullName()] = true
	if md.ParentFile().Syntax() != protoreflect.Proto3 {
		return false
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if sub := fd.Message(); sub != nil && !allProto3(sub, seen) {
			return false
		}
	}
	return true
}
