package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/reqid"
)

// requestBody is a REST request's body, read whole by edge, so the error
// handler can name the field a decoding error is about (the generated gateway
// code keeps only the error's text).
type requestBody struct {
	*bytes.Reader
	raw []byte
}

func (*requestBody) Close() error { return nil }

// jsonMarshaler is the gateway's JSON marshaler with a decoder that decodes
// the whole body with protojson, so a decoding error's position is a position
// in the body; request and answer types with a codec of their own
// (DecodeJSONWith, EncodeJSONWith) go through it first, and a request type
// with a limit (LimitWith) is checked before any of them.
type jsonMarshaler struct{ *runtime.JSONPb }

func (j jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	if u, ok := r.(*fileUpload); ok { // a raw file upload (fileUploads)
		return runtime.DecoderFunc(func(v any) error {
			m, ok := v.(proto.Message)
			if !ok {
				return fmt.Errorf("a file upload decodes into a request message, not %T", v)
			}
			return u.decode(m)
		})
	}
	return runtime.DecoderFunc(func(v any) error {
		var b []byte
		if rb, ok := r.(*requestBody); ok { // read whole by edge: not copied again
			b = rb.raw[len(rb.raw)-rb.Len():]
			rb.Reset(nil)
		} else {
			var err error
			if b, err = io.ReadAll(r); err != nil {
				return err
			}
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return io.EOF // no body: the generated code takes an empty request
		}
		m, ok := v.(proto.Message)
		if ok {
			// The request itself (not a body bound to one of its
			// fields): checked before anything decodes it (LimitWith),
			// refused after the guard (localChannel).
			if check := limitOf(m).json; check != nil {
				if err := check(b); err != nil {
					refuse(m, err)
					return nil
				}
			}
		}
		if !ok {
			// A body bound to a message field: the code passes **T.
			rv := reflect.ValueOf(v)
			if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Pointer {
				return j.Unmarshal(b, v)
			}
			if rv.Elem().IsNil() {
				rv.Elem().Set(reflect.New(rv.Elem().Type().Elem()))
			}
			if m, ok = rv.Elem().Interface().(proto.Message); !ok {
				return j.Unmarshal(b, v)
			}
		}
		if decodeJSONRegistered(b, m) {
			return nil
		}
		return j.UnmarshalOptions.Unmarshal(b, m)
	})
}

// Marshal writes v with its registered encoder (EncodeJSONWith) when it has
// one that takes v, else with protojson.
func (j jsonMarshaler) Marshal(v any) ([]byte, error) {
	if m, ok := v.(proto.Message); ok {
		if b, ok := encodeJSONRegistered(m); ok {
			return b, nil
		}
	}
	return j.JSONPb.Marshal(v)
}

// protojsonPos finds "(line L:C)" in a protojson error.
var protojsonPos = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// bodyError turns a protojson error message into a violation of the body
// field at the error's position ("body" when it has none, e.g. a truncated
// document).
func bodyError(b []byte, msg string) error {
	field, reason := BodyFault(b, msg)
	return apperr.Invalid(field, "%s", reason)
}

// BodyFault is where in the JSON document b a protojson error message
// points, as a field path ("events[0].gpu_count"; "body" when it names no
// position), and the message without its prefix and position.
func BodyFault(b []byte, msg string) (field, reason string) {
	reason = msg
	if i := strings.Index(msg, "): "); i >= 0 {
		reason = msg[i+3:]
	} else {
		reason = strings.TrimPrefix(reason, "proto: ")
	}
	field = "body"
	if line, col, ok := protojsonPosition(msg); ok {
		if p := jsonPathAt(b, offsetOf(b, line, col)); p != "" {
			field = p
		}
	}
	return field, reason
}

// protojsonPosition is the line and column a protojson error names; not ok
// when it names none, or numbers that do not fit an int (the error then
// names the body, not a field found at a made-up position).
func protojsonPosition(msg string) (line, col int, ok bool) {
	sm := protojsonPos.FindStringSubmatch(msg)
	if sm == nil {
		return 0, 0, false
	}
	line, err := strconv.Atoi(sm[1])
	if err != nil {
		return 0, 0, false
	}
	col, err = strconv.Atoi(sm[2])
	if err != nil {
		return 0, 0, false
	}
	return line, col, true
}

// offsetOf converts protojson's 1-based line and rune column to a byte offset.
func offsetOf(b []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return len(b)
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(b); c++ {
		_, n := utf8.DecodeRune(b[off:])
		off += n
	}
	return off
}

// jsonPathAt returns the path ("postings[1].amount") of the JSON value or
// key that contains byte offset off, or of the innermost container reached
// before a syntax error.
func jsonPathAt(b []byte, off int) string {
	type frame struct {
		obj     bool
		key     string
		needKey bool
		idx     int
	}
	var stack []frame
	path := func() string {
		var sb strings.Builder
		for _, f := range stack {
			if f.obj {
				if f.needKey {
					continue
				}
				if sb.Len() > 0 {
					sb.WriteByte('.')
				}
				sb.WriteString(strings.ToValidUTF8(f.key, "\uFFFD"))
			} else if f.idx >= 0 {
				fmt.Fprintf(&sb, "[%d]", f.idx)
			}
		}
		return sb.String()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return path()
		}
		end := int(dec.InputOffset())
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].obj {
				stack[len(stack)-1].needKey = true
			}
			continue
		}
		if top != nil && top.obj && top.needKey { // a key
			top.key, top.needKey = fmt.Sprint(tok), false
			if end > off {
				return path()
			}
			continue
		}
		if top != nil && !top.obj {
			top.idx++
		}
		if end > off {
			return path()
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{obj: true, needKey: true})
		case json.Delim('['):
			stack = append(stack, frame{idx: -1})
		default:
			if top != nil && top.obj {
				top.needKey = true
			}
		}
	}
}

// errorHandler writes gateway errors as gRPC status JSON. A body the decoder
// refused gets its field violation; an error that did not come from our gRPC
// listener (which already made it public) goes through apperr.Public, so a
// connection failure, say, answers a generic message with the request id.
func errorHandler(log *slog.Logger) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		if rb, ok := r.Body.(*requestBody); ok {
			if s, _ := status.FromError(err); s.Code() == codes.InvalidArgument && len(s.Details()) == 0 && strings.HasPrefix(s.Message(), "proto:") {
				err = apperr.ToStatus(bodyError(rb.raw, s.Message()))
			}
		}
		if !hasRequestInfo(err) {
			err = apperr.Public(reqid.With(ctx, reqid.From(r.Context())), log, r.Method+" "+r.URL.Path, err)
		}
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
	}
}

// routingError answers a path the gateway has no route for, or a method the
// path does not take, with its HTTP status (404, 405), never the gateway's
// default 501 for a wrong method (found by FuzzPutPayoutMethod: PUT
// /v1/providers//payout-method).
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	code := codes.InvalidArgument
	switch httpStatus {
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusMethodNotAllowed:
		code = codes.Unimplemented
	}
	writeStatus(w, reqid.From(r.Context()), httpStatus, status.New(code, http.StatusText(httpStatus)))
}

func hasRequestInfo(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range s.Details() {
		if _, ok := d.(*errdetails.RequestInfo); ok {
			return true
		}
	}
	return false
}

// writeStatus writes st as the gateway writes errors (gRPC status JSON, proto
// field names), with the request id, for answers made before the gateway.
func writeStatus(w http.ResponseWriter, id string, code int, st *status.Status) {
	if withID, err := st.WithDetails(&errdetails.RequestInfo{RequestId: id}); err == nil {
		st = withID
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(st.Proto())
	if err != nil {
		b = []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// requestIDHeader forwards the edge's request id to the gRPC listener, and
// a caller's W3C trace context (traceparent, tracestate), which the gRPC
// listener's OpenTelemetry handler continues: a REST call's spans join the
// caller's trace without a span of their own at the REST edge.
func requestIDHeader(key string) (string, bool) {
	switch http.CanonicalHeaderKey(key) {
	case reqid.Header:
		return reqid.MetadataKey, true
	case "Traceparent":
		return "traceparent", true
	case "Tracestate":
		return "tracestate", true
	}
	return runtime.DefaultHeaderMatcher(key)
}
