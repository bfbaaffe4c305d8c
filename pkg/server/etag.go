package server

import "net/http"

// Headers the gateway writes for a handler's "etag" and
// "gpubill-not-modified" response metadata (its default outgoing matcher
// prefixes them with Grpc-Metadata-).
const (
	gatewayETag        = "Grpc-Metadata-Etag"
	gatewayNotModified = "Grpc-Metadata-Gpubill-Not-Modified"
)

// conditionalGET lets a gRPC handler answer a conditional GET: its "etag"
// header becomes ETag, and "gpubill-not-modified" (the client's
// If-None-Match named the current ETag) a 304 without a body.
func conditionalGET(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&etagWriter{ResponseWriter: w}, r)
	})
}

type etagWriter struct {
	http.ResponseWriter
	wrote, notModified bool
}

func (e *etagWriter) WriteHeader(code int) {
	if e.wrote {
		return
	}
	e.wrote = true
	h := e.Header()
	if tag := h.Get(gatewayETag); tag != "" {
		h.Del(gatewayETag)
		h.Set("ETag", tag)
	}
	if h.Get(gatewayNotModified) != "" {
		h.Del(gatewayNotModified)
		if code == http.StatusOK {
			e.notModified = true
			h.Del("Content-Type")
			h.Del("Content-Length")
			code = http.StatusNotModified
		}
	}
	e.ResponseWriter.WriteHeader(code)
}

func (e *etagWriter) Write(b []byte) (int, error) {
	if !e.wrote {
		e.WriteHeader(http.StatusOK)
	}
	if e.notModified {
		return len(b), nil // a 304 has no body
	}
	return e.ResponseWriter.Write(b)
}

// Flush keeps streaming responses working through the wrapper.
func (e *etagWriter) Flush() {
	if f, ok := e.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
