package server

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictQuery parses a REST request's query parameters as the gateway does,
// but refuses one that names no field of the request (a 400 naming it): the
// gateway skipped it, so `as-of=` (the CLI flag's spelling) answered the
// segregated-funds report of now and `?lease=` every lease's charges.
type strictQuery struct{ runtime.DefaultQueryParser }

// mapKeyRe is the `field[key]` form of a map entry.
var mapKeyRe = regexp.MustCompile(`^(.*)\[(.*)\]$`)

// Parse implements runtime.QueryParameterParser.
func (q *strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	var unknown []string
	for key := range values {
		name := key
		if m := mapKeyRe.FindStringSubmatch(key); len(m) == 3 {
			name = m[1]
		}
		if !knownFieldPath(msg.ProtoReflect().Descriptor(), strings.Split(name, ".")) {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("unknown query parameter %s (GET /v1/openapi.json lists each path's parameters)", strings.Join(quoteAll(unknown), ", "))
	}
	return q.DefaultQueryParser.Parse(msg, values, filter)
}

// knownFieldPath reports whether path names a field of md (by its proto or
// JSON name), through message fields.
func knownFieldPath(md protoreflect.MessageDescriptor, path []string) bool {
	for i, name := range path {
		fields := md.Fields()
		f := fields.ByName(protoreflect.Name(name))
		if f == nil {
			f = fields.ByJSONName(name)
		}
		if f == nil {
			return false
		}
		if i < len(path)-1 {
			if f.Message() == nil || f.IsMap() {
				return false
			}
			md = f.Message()
		}
	}
	return len(path) > 0
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
