// Package server runs gpubill's gRPC and REST (grpc-gateway) listeners for one
// or many services: the same code serves a service alone and every service in
// `gpubill dev`.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/reqid"
)

const (
	shutdownTimeout      = 15 * time.Second
	readyCheckTimout     = 2 * time.Second
	grpcResponseBytesMax = 32 << 20 // answers the gateway relays (list pages, reports)
)

// Service is what a gpubill service plugs into the server.
type Service interface {
	RegisterGRPC(s *grpc.Server)
	RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error
	Policy() auth.Policy
}

// Check is a readiness probe (database, NATS, Temporal reachable).
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// Options configure a Server.
type Options struct {
	GRPCAddr string
	HTTPAddr string
	Secret   []byte
	Log      *slog.Logger
	Services []Service
	Ready    []Check
	// HTTPHandlers are extra plain-HTTP routes (e.g. CSV downloads), path → handler.
	HTTPHandlers map[string]http.Handler
	// GRPCListener, when set, is used instead of listening on GRPCAddr (so a
	// composition root can know the address before the services exist).
	GRPCListener net.Listener
}

// Server is a started pair of listeners.
type Server struct {
	GRPCAddr string // actual addresses (useful with :0)
	HTTPAddr string

	grpc   *grpc.Server
	http   *http.Server
	conn   *grpc.ClientConn
	health *health.Server
	errc   chan error
	once   sync.Once
}

// Start listens and serves in the background.
func Start(ctx context.Context, o Options) (*Server, error) {
	gl := o.GRPCListener
	if gl == nil {
		var err error
		if gl, err = net.Listen("tcp", o.GRPCAddr); err != nil {
			return nil, fmt.Errorf("listen grpc %s: %w", o.GRPCAddr, err)
		}
	}
	hl, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("listen http %s: %w", o.HTTPAddr, err)
	}
	policy := auth.Policy{}
	for _, svc := range o.Services {
		for k, v := range svc.Policy() {
			policy[k] = v
		}
	}
	gs := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.MaxRecvMsgSize(grpcIngestBytesMax),
		grpc.ChainUnaryInterceptor(
			obs.UnaryServerMetrics(), // first: it counts the code the client gets
			requestID(),
			apperr.UnaryInterceptor(o.Log),
			recoverer(o.Log),
			auth.UnaryInterceptor(o.Secret, policy),
			sizeLimit(),
			textGuard(),
		),
	)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	for _, svc := range o.Services {
		svc.RegisterGRPC(gs)
	}
	s := &Server{GRPCAddr: gl.Addr().String(), HTTPAddr: hl.Addr().String(), grpc: gs, health: hs, errc: make(chan error, 2)}
	go func() { s.errc <- gs.Serve(gl) }()

	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(textGuardClient()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcResponseBytesMax), grpc.MaxCallSendMsgSize(grpcIngestBytesMax)))
	if err != nil {
		gs.Stop()
		hl.Close()
		return nil, err
	}
	s.conn = conn
	gw := NewGatewayMux(o.Log)
	for _, svc := range o.Services {
		if err := svc.RegisterGateway(ctx, gw, conn); err != nil {
			gs.Stop()
			hl.Close()
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyCheckTimout)
		defer cancel()
		// Without a valid token, only ok / not ok per dependency: an
		// error's text (addresses, versions) is for operators.
		detail := validBearer(r, o.Secret)
		res := map[string]string{}
		code := http.StatusOK
		for _, c := range o.Ready {
			if err := c.Check(ctx); err != nil {
				res[c.Name] = "not ok"
				if detail {
					res[c.Name] = "not ok: " + err.Error()
				}
				code = http.StatusServiceUnavailable
			} else {
				res[c.Name] = "ok"
			}
		}
		writeJSON(w, code, res)
	})
	mux.Handle("GET /metrics", obs.MetricsHandler())
	for p, h := range o.HTTPHandlers {
		mux.Handle(p, h)
	}
	// Account addresses go into paths with their colons as they are: the
	// gateway reads a trailing ":verb" only on routes that declare one.
	mux.Handle("/", conditionalGET(gw))
	s.http = &http.Server{
		Handler:           obs.HTTPMetrics(edge(obs.MuxRoute(mux))),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    headerBytesMax,
	}
	go func() {
		if err := s.http.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
			s.errc <- err
		}
	}()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// NewGatewayMux returns the REST mux: proto field names in JSON, every field
// emitted, unknown input fields ignored, HttpBody passed through raw; a body
// that does not decode is a 400 naming its field, and errors carry the
// request id (see errorHandler).
func NewGatewayMux(log *slog.Logger) *runtime.ServeMux {
	jsonpb := jsonMarshaler{&runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}}
	return runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: jsonpb}),
		runtime.WithUnescapingMode(runtime.UnescapingModeAllCharacters),
		runtime.WithErrorHandler(errorHandler(log)),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.WithIncomingHeaderMatcher(requestIDHeader),
		runtime.WithMetadata(obs.GatewayRoute), // the route label of gpubill_http_requests_total
	)
}

// validBearer reports whether r carries a valid token.
func validBearer(r *http.Request, secret []byte) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || len(secret) == 0 {
		return false
	}
	_, err := auth.Verify(secret, strings.TrimSpace(tok))
	return err == nil
}

// requestID gives every gRPC call a request id: the one the REST edge made
// (or a direct caller sent, when well-formed), else a fresh one; it is
// answered in the x-request-id header.
func requestID() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id := ""
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(reqid.MetadataKey); len(v) == 1 && reqid.Valid(v[0]) {
				id = v[0]
			}
		}
		if id == "" {
			id = reqid.New()
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs(reqid.MetadataKey, id)) // fails only after headers went out
		return handler(reqid.With(ctx, id), req)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func recoverer(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in handler", "request_id", reqid.From(ctx), "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = fmt.Errorf("internal error in %s", info.FullMethod)
			}
		}()
		return handler(ctx, req)
	}
}

// Err reports a listener failure.
func (s *Server) Err() <-chan error { return s.errc }

// Conn is a client connection to this server's gRPC listener.
func (s *Server) Conn() *grpc.ClientConn { return s.conn }

// Shutdown stops both listeners gracefully.
func (s *Server) Shutdown(ctx context.Context) {
	s.once.Do(func() {
		s.health.Shutdown()
		ctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
		defer cancel()
		_ = s.http.Shutdown(ctx)
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
		}
		_ = s.conn.Close()
	})
}
