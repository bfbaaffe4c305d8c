package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/reqid"
)

// fileUploadPaths are the POST routes that also take a file as the raw body
// (the route's JSON form carries it in the field "content"), by their
// request message: the body with Content-Type text/csv, application/xml or
// text/xml is that request's content, its query parameters the other fields
// and "format" the file's kind (csv, camt053) unless a parameter names it,
// as the JSON form would be decoded. A route with body "*" reads no query
// parameters otherwise. As strictQuery holds elsewhere, a parameter that
// names no field of the request (`?statment_id=`), names the file's own
// field (content), or is given twice (or by its two names) is a 400 naming
// it: the JSON form dropped the first silently and kept the first of a
// repeated one.
var fileUploadPaths = map[string]protoreflect.FullName{
	"/v1/bank-statements": "gpubill.ledger.v1.ImportBankStatementRequest",
	"/v1/bank-files":      "gpubill.payout.v1.ImportBankFileRequest", // payout's pain.002 / camt.054 (format is not one of its fields: dropped)
}

// uploadForm is the request's fields but content, by field name, from the
// query q of an upload of a request md; an error names the parameter it
// refuses.
func uploadForm(md protoreflect.MessageDescriptor, q url.Values) (map[string]string, error) {
	keys := slices.Sorted(maps.Keys(q))
	form := make(map[string]string, len(q)+1)
	for _, k := range keys {
		vs := q[k]
		f := md.Fields().ByName(protoreflect.Name(k))
		if f == nil {
			f = md.Fields().ByJSONName(k)
		}
		switch {
		case f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated:
			return nil, apperr.Invalid(k, "unknown query parameter %q (GET /v1/openapi.json lists each path's parameters)", k)
		case f.Name() == "content":
			return nil, apperr.Invalid(k, "query parameter %q: the file is the request body", k)
		case len(vs) > 1:
			return nil, apperr.Invalid(k, "query parameter %q given %d times; at most once", k, len(vs))
		}
		if _, dup := form[string(f.Name())]; dup {
			return nil, apperr.Invalid(k, "query parameter %q: field %s is given twice (by its two names); at most once", k, f.Name())
		}
		form[string(f.Name())] = vs[0]
	}
	return form, nil
}

// fileUpload is a raw file upload as the gateway's decoder takes it (its
// body: jsonMarshaler hands it to decode): the request's fields from the
// query, and the file. It was rewritten into the JSON form, escaped, which
// the decoder read again and unescaped: a 64 MiB camt.053 was fourteen
// times its size in the heap at once, its JSON form twice its size.
type fileUpload struct {
	*bytes.Reader // empty: what the generated code drains after decoding
	form          map[string]string
	file          []byte
}

func (*fileUpload) Close() error { return nil }

// decode fills m, a request of the upload's route, as protojson fills it
// from the JSON form: the form's fields (one it lacks, format of a bank
// file, dropped as unknown) and content. A LimitWith check of the request
// type sees the JSON form.
func (u *fileUpload) decode(m proto.Message) error {
	if check := limitOf(m).json; check != nil {
		form := maps.Clone(u.form)
		form["content"] = string(u.file)
		b, err := json.Marshal(form)
		if err != nil {
			return err
		}
		if err := check(b); err != nil {
			refuse(m, err)
			return nil
		}
	}
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for k, v := range u.form {
		if f := fields.ByName(protoreflect.Name(k)); f != nil {
			r.Set(f, protoreflect.ValueOfString(v))
		}
	}
	f := fields.ByName("content")
	if f == nil || f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
		return fmt.Errorf("%s: no text field content to take the file", r.Descriptor().FullName())
	}
	r.Set(f, protoreflect.ValueOfString(string(u.file)))
	return nil
}

// fileFormats maps an upload's media type to its "format" field.
var fileFormats = map[string]string{
	"text/csv":        "csv",
	"application/xml": "camt053",
	"text/xml":        "camt053",
}

// fileUploads rewrites a raw file upload into the route's JSON form.
func fileUploads(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, upload := fileUploadPaths[r.URL.Path]
		if r.Method != http.MethodPost || !upload {
			next.ServeHTTP(w, r)
			return
		}
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		format, ok := fileFormats[strings.ToLower(mt)]
		if err != nil || !ok {
			next.ServeHTTP(w, r)
			return
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		md, ok := d.(protoreflect.MessageDescriptor)
		if err != nil || !ok { // not linked in: this server does not serve the route
			next.ServeHTTP(w, r)
			return
		}
		var raw []byte
		if rb, ok := r.Body.(*requestBody); ok { // edge has read it whole
			raw = rb.raw
		}
		if !utf8.Valid(raw) { // a text field holds UTF-8 only: refused before it is copied into one
			writeStatus(w, r.Header.Get(reqid.Header), http.StatusBadRequest,
				status.New(codes.InvalidArgument, "invalid content: the file is not valid UTF-8"))
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil { // r.URL.Query() drops what does not parse
			writeStatus(w, r.Header.Get(reqid.Header), http.StatusBadRequest,
				status.New(codes.InvalidArgument, "malformed query string"))
			return
		}
		form, err := uploadForm(md, q)
		if err != nil {
			writeStatus(w, r.Header.Get(reqid.Header), http.StatusBadRequest, status.Convert(apperr.ToStatus(err)))
			return
		}
		if form["format"] == "" {
			form["format"] = format
		}
		r2 := r.Clone(r.Context())
		r2.Body = &fileUpload{Reader: bytes.NewReader(nil), form: form, file: raw}
		r2.ContentLength = int64(len(raw))
		r2.Header.Set("Content-Type", "application/json") // the gateway's marshaler, whose decoder takes the upload
		next.ServeHTTP(w, r2)
	})
}
