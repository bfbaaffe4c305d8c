package server

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/reqid"
)

// fileUploadPaths are the POST routes that also take a file as the raw body
// (the route's JSON form carries it in the field "content"): the body with
// Content-Type text/csv, application/xml or text/xml becomes that JSON
// form, its query parameters the other fields and "format" the file's kind
// (csv, camt053), before the gateway decodes it. A route with body "*"
// reads no query parameters otherwise.
var fileUploadPaths = map[string]bool{
	"/v1/bank-statements": true,
	"/v1/bank-files":      true, // payout's pain.002 / camt.054 (format is not one of its fields: ignored)
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
		if r.Method != http.MethodPost || !fileUploadPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		format, ok := fileFormats[strings.ToLower(mt)]
		if err != nil || !ok {
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
		form := map[string]string{}
		for k, vs := range r.URL.Query() {
			if len(vs) > 0 {
				form[k] = vs[0]
			}
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
