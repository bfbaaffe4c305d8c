package obs

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Every gpubill metric lives on the default registry (pkg/deadletter counts
// there too), served at GET /metrics without a token (DESIGN §7).

// RED metrics. Label values are bounded: a gRPC method is one the server
// registered (gRPC answers Unimplemented before any interceptor otherwise),
// and a route is a pattern, never a raw path.
var (
	grpcRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_grpc_requests_total",
		Help: "gRPC calls handled, by full method and status code (REST calls reach gRPC through the gateway and count here too).",
	}, []string{"method", "code"})
	grpcDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpubill_grpc_request_duration_seconds",
		Help:    "gRPC call latency by full method.",
		Buckets: prometheus.DefBuckets,
	}, []string{"method"})
	httpRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_http_requests_total",
		Help: "HTTP requests by route (method and path pattern; \"unmatched\" when none) and status code.",
	}, []string{"route", "code"})
	httpDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpubill_http_request_duration_seconds",
		Help:    "HTTP request latency by route.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route"})
)

// MetricsHandler serves the default registry in the Prometheus text format.
func MetricsHandler() http.Handler { return promhttp.Handler() }

// UnaryServerMetrics counts and times every unary gRPC call by method and
// code. Put it first in the chain so it sees the code the client gets.
func UnaryServerMetrics() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		grpcRequests.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
		grpcDuration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

type routeKey struct{}

// HTTPMetrics counts and times requests by route: the net/http pattern that
// matched (reported by MuxRoute), or the grpc-gateway path pattern
// (reported by GatewayRoute); "unmatched" when neither (a 404, or a request
// refused before routing).
func HTTPMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		route := new(string)
		r = r.WithContext(context.WithValue(r.Context(), routeKey{}, route))
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		name := *route
		if name == "" {
			name = "unmatched"
		}
		httpRequests.WithLabelValues(name, strconv.Itoa(rec.code)).Inc()
		httpDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	})
}

// MuxRoute wraps a net/http ServeMux (inside any middleware that copies
// the request) and reports the pattern that matched to HTTPMetrics; the
// catch-all "/" is left to GatewayRoute.
func MuxRoute(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r) // ServeMux sets r.Pattern on this request
		if route, ok := r.Context().Value(routeKey{}).(*string); ok && *route == "" && r.Pattern != "/" {
			*route = r.Pattern
		}
	})
}

// CountRefusedCall counts a call of method refused with code before it
// reached the interceptor chain (the pre-auth gate: a large-body route's
// caller, or any gRPC call at the listener), as the chain counts a call it
// refuses: RED's request and error rates keep the refusals.
func CountRefusedCall(method string, code codes.Code) {
	grpcRequests.WithLabelValues(method, code.String()).Inc()
}

// ReportRoute reports route (a pattern, "POST /v1/usage-events") to
// HTTPMetrics for r, when the handler answering r knows it before routing
// does (a large-body route refused before its body is read).
func ReportRoute(r *http.Request, route string) {
	if p, ok := r.Context().Value(routeKey{}).(*string); ok {
		*p = route
	}
}

// GatewayRoute is a grpc-gateway metadata annotator (runtime.WithMetadata)
// that reports the matched path pattern to HTTPMetrics; it adds no metadata.
func GatewayRoute(ctx context.Context, r *http.Request) metadata.MD {
	if p, ok := runtime.HTTPPathPattern(ctx); ok {
		if route, ok := r.Context().Value(routeKey{}).(*string); ok {
			*route = r.Method + " " + p
		}
	}
	return nil
}

type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Sources are collectors that read live state on scrape (outbox depth,
// consumer lag, payouts by status), keyed by who set them. Setting a key
// again replaces its collector, so a process that builds a service twice
// (tests, a restarted stack) reports the newest one, never a duplicate.
var (
	sourcesMu   sync.Mutex
	sources     = map[string]prometheus.Collector{}
	sourcesOnce sync.Once
)

// SetSource installs c under key; the returned function removes it (if it
// is still the one installed).
func SetSource(key string, c prometheus.Collector) (remove func()) {
	sourcesOnce.Do(func() { prometheus.MustRegister(sourceSet{}) })
	sourcesMu.Lock()
	sources[key] = c
	sourcesMu.Unlock()
	return func() {
		sourcesMu.Lock()
		defer sourcesMu.Unlock()
		if sources[key] == c {
			delete(sources, key)
		}
	}
}

// sourceSet is an unchecked collector (it describes nothing), since the set
// of sources changes at run time.
type sourceSet struct{}

func (sourceSet) Describe(chan<- *prometheus.Desc) {}

func (sourceSet) Collect(ch chan<- prometheus.Metric) {
	sourcesMu.Lock()
	keys := make([]string, 0, len(sources))
	for k := range sources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cs := make([]prometheus.Collector, len(keys))
	for i, k := range keys {
		cs[i] = sources[k]
	}
	sourcesMu.Unlock()
	for _, c := range cs {
		c.Collect(ch)
	}
}
