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
	"maps"
	"net"
	"net/http"
	"net/netip"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cmdline"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/reqid"
)

const (
	shutdownTimeout  = 15 * time.Second
	readyCheckTimout = 2 * time.Second
)

// Service is what a gpubill service plugs into the server.
type Service interface {
	RegisterGRPC(s grpc.ServiceRegistrar)
	// RegisterGateway routes REST paths to the service's gRPC methods over
	// conn: the server's in-process channel (the same interceptors, no
	// socket, no wire encoding).
	RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error
	Policy() auth.Policy
}

// HTTPRoutes is implemented by a service that also serves plain HTTP
// routes beside its gRPC API: pattern ("POST /v1/…") → handler. They are for
// callers that speak another protocol than gpubill's, such as a payment
// rail's signed notifications (no bearer token; the rail's own answers), so
// such a handler authenticates its caller itself. The REST edge (request id,
// body limits, metrics) applies to them as to every route.
type HTTPRoutes interface {
	HTTPRoutes() map[string]http.Handler
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
	// HTTPListener, when set, is used instead of listening on HTTPAddr.
	HTTPListener net.Listener
	// Allow limits roles to client addresses (GPUBILL_ALLOW_<ROLE>), over the
	// gRPC peer address and the REST client address.
	Allow auth.Allowlist
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the
	// REST client; from anyone else the header is ignored (the default).
	TrustedProxies []netip.Prefix
	// Audit records every write (pkg/audit). The composition roots (gpubill
	// dev, a service run alone) always set it; nil serves without an audit
	// log (unit tests of one service).
	Audit *audit.Recorder
	// AllAPIDocs serves the whole API's document and page at /docs and
	// /v1/openapi.json, not only the registered services' (a service run
	// alone behind a gateway that routes them all: GPUBILL_API_DOCS=all).
	AllAPIDocs bool
}

// Policies merges the services' policies: the one table the interceptor
// enforces.
func Policies(services []Service) auth.Policy {
	policy := auth.Policy{}
	for _, svc := range services {
		for k, v := range svc.Policy() {
			policy[k] = v
		}
	}
	return policy
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

	stopAudit context.CancelFunc
	log       *slog.Logger
}

// Start listens and serves in the background.
func Start(ctx context.Context, o Options) (*Server, error) {
	if err := auth.CheckSecret(o.Secret); err != nil {
		return nil, err
	}
	gl, hl, err := listen(o)
	if err != nil {
		return nil, err
	}
	gatewayKey, err := newGatewayKey()
	if err != nil {
		gl.Close()
		hl.Close()
		return nil, err
	}
	guard := auth.Guard{Secret: o.Secret, Policy: Policies(o.Services), Allow: o.Allow, GatewayKey: gatewayKey, Tokens: &auth.TokenCache{}}
	auditCtx, stopAudit := context.WithCancel(context.WithoutCancel(ctx))
	gw := newGateway(o, gatewayKey)
	gate := callGate{guard: guard, audit: o.Audit, gateway: gw, log: o.Log, methods: map[string]bool{}}
	gs, hs, local := newGRPCServer(o, guard, gate)
	s := &Server{GRPCAddr: gl.Addr().String(), HTTPAddr: hl.Addr().String(), grpc: gs, health: hs, errc: make(chan error, 2), stopAudit: stopAudit, log: o.Log}
	go func() { s.errc <- gs.Serve(gl) }()

	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		hl.Close()
		return nil, err
	}
	s.conn = conn
	mux, err := newHTTPMux(ctx, o, gs, local, gw)
	if err != nil {
		gs.Stop()
		hl.Close()
		return nil, err
	}
	s.http = &http.Server{
		Handler:           obs.HTTPMetrics(edge(obs.MuxRoute(mux), gate)),
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
	if o.Audit != nil {
		go o.Audit.Run(auditCtx)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// listen opens the gRPC listener and the REST listener (unless Options
// brings them); on an error neither stays open.
func listen(o Options) (gl, hl net.Listener, err error) {
	gl = o.GRPCListener
	if gl == nil {
		if gl, err = net.Listen("tcp", o.GRPCAddr); err != nil {
			return nil, nil, fmt.Errorf("listen grpc %s: %w", o.GRPCAddr, err)
		}
	}
	hl = o.HTTPListener
	if hl == nil {
		if hl, err = net.Listen("tcp", o.HTTPAddr); err != nil {
			gl.Close()
			return nil, nil, fmt.Errorf("listen http %s: %w", o.HTTPAddr, err)
		}
	}
	return gl, hl, nil
}

// keepaliveEnforcement lets in the pings of the services' internal
// connections (every 30 s, idle or not: svc.DialInternal); gRPC's default
// (one per 5 minutes, none while idle) answered the third with GOAWAY
// "too_many_pings", and the connection broke.
var keepaliveEnforcement = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}

// keepaliveServer asks a client to reconnect after 5 minutes on a
// connection (GOAWAY; calls in flight run to their end), so it looks its
// target up again: a caller balancing over a headless Service's replicas
// finds the ones started since (gRPC's DNS resolver looks again only when a
// connection fails).
var keepaliveServer = keepalive.ServerParameters{MaxConnectionAge: 5 * time.Minute}

// KeepaliveOptions are the gRPC server's keepalive settings (and a test's
// stand-in server's).
func KeepaliveOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.KeepaliveEnforcementPolicy(keepaliveEnforcement), grpc.KeepaliveParams(keepaliveServer)}
}

// newGRPCServer builds the gRPC server with its interceptor chain, health and
// reflection, and registers every service on it and on local: the in-process
// channel the REST gateway calls through, with the same interceptors and
// stats handler, so a REST call is authorised, audited, counted and traced
// as the same call over gRPC is, without a socket or wire encoding between
// them (localChannel).
func newGRPCServer(o Options, guard auth.Guard, gate callGate) (*grpc.Server, *health.Server, *localChannel) {
	interceptors := []grpc.UnaryServerInterceptor{
		obs.UnaryServerMetrics(), // first of the shared chain: it counts the code the client gets
		requestID(),
	}
	if o.Audit != nil {
		// Outside the guard (refused writes are recorded) and outside the
		// error mapping (the code recorded is the one the client gets).
		interceptors = append(interceptors, o.Audit.UnaryInterceptor(guard, reqid.From))
	}
	interceptors = append(interceptors, apperr.UnaryInterceptor(o.Log), recoverer(o.Log), guard.UnaryInterceptor(), sizeLimit(), textGuard())
	gs := grpc.NewServer(append(KeepaliveOptions(),
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		// Only a caller the guard passes for the method gets a message
		// of up to a statement's 64 MiB received (grpc-go has no limit
		// by method): the tap refuses any other before its message.
		grpc.InTapHandle(gate.tap),
		grpc.MaxRecvMsgSize(statementBytesMax),
		// textCodec spares textGuard the walk of a request that cannot
		// hold bad text; forgetText and forgetStreamText drop its notes.
		grpc.ForceServerCodecV2(newTextCodec()),
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{forgetText()}, interceptors...)...),
		grpc.ChainStreamInterceptor(forgetStreamText()),
		// Calls run on reused goroutines (their stacks already grown)
		// while one is free, else on a new one as without the option.
		grpc.NumStreamWorkers(uint32(goruntime.GOMAXPROCS(0))),
	)...)
	local := newLocalChannel(chainUnary(interceptors), otelgrpc.NewServerHandler())
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	both := registrars{gs, local}
	for _, svc := range o.Services {
		svc.RegisterGRPC(both)
	}
	// What the tap admits to the guard: before gs serves, so the tap's
	// reads of the map follow these writes.
	for name, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			gate.methods["/"+name+"/"+m.Name] = true
		}
	}
	return gs, hs, local
}

// registrars registers a service on each of them.
type registrars []grpc.ServiceRegistrar

func (rs registrars) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, r := range rs {
		r.RegisterService(desc, impl)
	}
}

// newGateway is the REST gateway's mux: a call's metadata carries the
// gateway's key and, proved by it, the client's address (of o's trusted
// proxies). The upload gate reads the same metadata (callGate.restContext).
func newGateway(o Options, gatewayKey string) *runtime.ServeMux {
	return NewGatewayMux(o.Log, runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
		return metadata.Pairs(auth.GatewayKeyHeader, gatewayKey, auth.ClientAddrHeader, ClientAddr(r, o.TrustedProxies).String())
	}))
}

// newHTTPMux builds the REST routes: health, readiness, metrics, the API
// documents, plain-HTTP handlers and the gateway gw (over conn, the
// server's in-process channel) for everything else.
func newHTTPMux(ctx context.Context, o Options, gs *grpc.Server, conn grpc.ClientConnInterface, gw *runtime.ServeMux) (*http.ServeMux, error) {
	for _, svc := range o.Services {
		if err := svc.RegisterGateway(ctx, gw, conn); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", readyHandler(o.Ready, o.Secret))
	mux.Handle("GET /metrics", obs.MetricsHandler())
	var documented []string // none: the whole document
	if !o.AllAPIDocs {
		documented = slices.Collect(maps.Keys(gs.GetServiceInfo()))
	}
	spec, page, err := apiDocs(documented, cmdline.Build().Version)
	if err != nil {
		return nil, err
	}
	serveAPIDocs(mux, spec, page)
	for p, h := range o.HTTPHandlers {
		mux.Handle(p, allowlisted(h, o.Secret, o.Allow, o.TrustedProxies))
	}
	for _, svc := range o.Services {
		if hr, ok := svc.(HTTPRoutes); ok {
			for p, h := range hr.HTTPRoutes() {
				mux.Handle(p, allowlisted(h, o.Secret, o.Allow, o.TrustedProxies))
			}
		}
	}
	// Account addresses go into paths with their colons as they are: the
	// gateway reads a trailing ":verb" only on routes that declare one.
	mux.Handle("/", conditionalGET(fileUploads(gw)))
	return mux, nil
}

// readyHandler answers /readyz: every check's result, 503 if one fails.
func readyHandler(checks []Check, secret []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyCheckTimout)
		defer cancel()
		// Without an operator's token (finance, auditor, admin), only ok /
		// not ok per dependency: an error's text (addresses, versions) is
		// for operators, not for a renter, provider or meter holding a
		// valid token of its own.
		detail := operatorBearer(r, secret)
		res := map[string]string{}
		code := http.StatusOK
		for _, c := range checks {
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
	}
}

// NewGatewayMux returns the REST mux: proto field names in JSON, every field
// emitted, unknown input fields of a body ignored (a query parameter naming
// no field is a 400: strictQuery), HttpBody passed through raw; a body
// that does not decode is a 400 naming its field, and errors carry the
// request id (see errorHandler).
func NewGatewayMux(log *slog.Logger, extra ...runtime.ServeMuxOption) *runtime.ServeMux {
	jsonpb := jsonMarshaler{&runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}}
	return runtime.NewServeMux(append([]runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: jsonpb}),
		runtime.WithUnescapingMode(runtime.UnescapingModeAllCharacters),
		runtime.WithErrorHandler(errorHandler(log)),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.WithIncomingHeaderMatcher(requestIDHeader),
		runtime.WithMetadata(obs.GatewayRoute), // the route label of gpubill_http_requests_total
		runtime.SetQueryParameterParser(&strictQuery{}),
	}, extra...)...)
}

// operatorBearer reports whether r carries a valid token of finance, an
// auditor or an admin.
func operatorBearer(r *http.Request, secret []byte) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || len(secret) == 0 {
		return false
	}
	p, err := auth.Verify(secret, strings.TrimSpace(tok))
	return err == nil && (p.Role == auth.RoleFinance || p.Role == auth.RoleAuditor || p.Role == auth.RoleAdmin)
}

// requestID gives every gRPC call a request id: the one the REST edge made
// (or a direct caller sent, when well-formed), else a fresh one; it is
// answered in the x-request-id header.
func requestID() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id := incomingRequestID(ctx)
		grpc.SetHeader(ctx, metadata.Pairs(reqid.MetadataKey, id)) // fails only after headers went out
		return handler(reqid.With(ctx, id), req)
	}
}

// incomingRequestID is the call's request id: the one the REST edge made
// (or a direct caller sent, when well-formed), else a fresh one.
func incomingRequestID(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, reqid.MetadataKey); len(v) == 1 && reqid.Valid(v[0]) {
		return v[0]
	}
	return reqid.New()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func recoverer(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic in handler", "request_id", reqid.From(ctx), "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = fmt.Errorf("internal error in %s", info.FullMethod)
			}
		}()
		return handler(ctx, req)
	}
}

// Methods lists the full names of every RPC the gRPC listener serves
// ("/gpubill.ledger.v1.LedgerService/GetAccount"), public ones included.
func (s *Server) Methods() []string {
	var out []string
	for name, info := range s.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			out = append(out, "/"+name+"/"+m.Name)
		}
	}
	slices.Sort(out)
	return out
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
		if err := s.http.Shutdown(ctx); err != nil && s.log != nil {
			s.log.Warn("REST listener: connections still open at the shutdown deadline were cut", "err", err)
		}
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
		}
		_ = s.conn.Close()
		s.stopAudit()
	})
}
