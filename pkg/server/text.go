package server

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
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
	var v apperr.Validator
	walkText(m.ProtoReflect(), "", &v)
	return v.Err()
}

// violationsMax bounds the violations one request reports.
const violationsMax = 20

func walkText(m protoreflect.Message, prefix string, v *apperr.Validator) {
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsMap():
			val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				key := k.String()
				if fd.MapKey().Kind() == protoreflect.StringKind {
					textViolation(key, name+" key", v)
				}
				elem := fmt.Sprintf("%s[%q]", name, strings.ToValidUTF8(key, "\uFFFD"))
				checkValue(fd.MapValue(), mv, elem, v)
				return true
			})
		case fd.IsList():
			l := val.List()
			for i := 0; i < l.Len(); i++ {
				checkValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i), v)
			}
		default:
			checkValue(fd, val, name, v)
		}
		return v.Len() < violationsMax
	})
}

func checkValue(fd protoreflect.FieldDescriptor, val protoreflect.Value, name string, v *apperr.Validator) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		textViolation(val.String(), name, v)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		walkText(val.Message(), name+".", v)
	}
}

func textViolation(s, field string, v *apperr.Validator) {
	switch {
	case !utf8.ValidString(s):
		v.Add(field, "is not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		v.Add(field, "contains a NUL byte")
	}
}

// textGuard applies checkText to every request the gRPC listener receives.
func textGuard() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m, ok := req.(proto.Message); ok {
			if err := checkText(m); err != nil {
				return nil, apperr.ToStatus(err)
			}
		}
		return handler(ctx, req)
	}
}

// textGuardClient applies checkText on the gateway's side of its connection:
// a path parameter with invalid UTF-8 (percent-encoded) would otherwise fail
// to marshal before it reaches the server.
func textGuardClient() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m, ok := req.(proto.Message); ok {
			if err := checkText(m); err != nil {
				return apperr.ToStatus(err)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
