package server

import (
	"bytes"
	"encoding/json"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/reqid"
)

// fileUploadPaths are the POST routes that also take a file as the raw body
// (the route's JSON form carries it in the field "content"), by their
// request message: the body with Content-Type text/csv, application/xml or
// text/xml becomes that JSON form, its query parameters the other fields
// and "format" the file's kind (csv, camt053) unless a parameter names it,
// before the gateway decodes it. A route with body "*" reads no query
// parameters otherwise. As strictQuery holds elsewhere, a parameter that
// names no field of the request (`?statment_id=`), names the file's own
// field (content), or is given twice is a 400 naming it: the JSON form
// dropped the first silently and kept the first of a repeated one.
var fileUploadPaths = map[string]protoreflect.FullName{
	"/v1/bank-statements": "gpubill.ledger.v1.ImportBankStatementRequest",
	"/v1/bank-files":      "gpubill.payout.v1.ImportBankFileRequest", // payout's pain.002 / camt.054 (format is not one of its fields: dropped)
}

// uploadForm is the JSON form's fields but content from the query q of an
// upload of a request md; an error names the parameter it refuses.
func uploadForm(md protoreflect.MessageDescriptor, q url.Values) (map[string]string, error) {
	keys := slices.Sorted(maps.Keys(q))
	form := make(map[string]string, len(q)+2)
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
		form[k] = vs[0]
	}
	return form, nil
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
		if !utf8.Valid(raw) { // JSON would replace the bad bytes silently
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
		form["content"] = string(raw)
		b, err := json.Marshal(form)
		if err != nil { // a map of strings always marshals
			next.ServeHTTP(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.Body = &requestBody{Reader: bytes.NewReader(b), raw: b}
		r2.ContentLength = int64(len(b))
		r2.Header.Set("Content-Type", "application/json")
		next.ServeHTTP(w, r2)
	})
}
