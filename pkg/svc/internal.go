package svc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
)

const internalTokenTTL = 10 * 365 * 24 * time.Hour

// internalServiceConfig balances an internal connection's calls over every
// address its target resolves to: a headless Service's name resolves to
// each ready replica (dns:///ledger-grpc:9090, the chart's), where gRPC's
// default (pick_first) sent every call of a caller to one of them. A target
// that resolves to one address (a ClusterIP, compose's service name) keeps
// its one connection.
const internalServiceConfig = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// internalKeepalive pings an internal connection's peer every Time and
// drops the connection when a ping goes unanswered for Timeout: a replica
// whose node vanished (no FIN, no RST) is left in ~40 s, where without
// pings its calls hung until their deadlines, and a caller without one
// until the kernel gave up on the socket (~15 min). server.KeepaliveOptions lets
// the pings in. A variable for the tests (gRPC's floor for Time is 10 s).
var internalKeepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}

// Router is a grpc.ClientConnInterface that sends each call to the
// connection serving its proto package (gpubill.ledger.v1 → ledger), so a
// service run alone reaches the others wherever they are deployed, and
// `gpubill dev` simply routes everything to itself.
type Router struct {
	routes   map[string]*grpc.ClientConn // service name → conn
	fallback *grpc.ClientConn
}

// Invoke implements grpc.ClientConnInterface.
func (r *Router) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return r.conn(method).Invoke(ctx, method, args, reply, opts...)
}

// NewStream implements grpc.ClientConnInterface.
func (r *Router) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return r.conn(method).NewStream(ctx, desc, method, opts...)
}

// conn picks by the proto package of "/gpubill.<service>.v1.X/Method".
func (r *Router) conn(method string) *grpc.ClientConn {
	parts := strings.SplitN(strings.TrimPrefix(method, "/"), ".", 3)
	if len(parts) == 3 && parts[0] == "gpubill" {
		if c, ok := r.routes[parts[1]]; ok {
			return c
		}
	}
	return r.fallback
}

// Close closes every connection.
func (r *Router) Close() error {
	for _, c := range r.routes {
		_ = c.Close()
	}
	return r.fallback.Close()
}

// NewInternalRouter builds the authenticated internal connection of a
// standalone service: calls to service S go to GPUBILL_<S>_GRPC when set
// (e.g. GPUBILL_LEDGER_GRPC=ledger:9090, or dns:///ledger-grpc:9090 to
// spread them over every replica a headless Service lists), else to self (this process's own
// gRPC address, as in the single binary). Calls carry a token of the
// internal service identity (role service, subject = the calling service's
// name) signed with the shared secret.
func NewInternalRouter(secret []byte, self, name string) (*Router, error) {
	dial := func(addr string) (*grpc.ClientConn, error) { return DialInternal(secret, addr, name) }
	fb, err := dial(self)
	if err != nil {
		return nil, fmt.Errorf("internal conn %s: %w", self, err)
	}
	r := &Router{routes: map[string]*grpc.ClientConn{}, fallback: fb}
	for _, name := range []string{"metering", "pricing", "ledger", "tax", "payout", "settlement"} {
		addr := os.Getenv("GPUBILL_" + strings.ToUpper(name) + "_GRPC")
		if addr == "" {
			continue
		}
		c, err := dial(addr)
		if err != nil {
			return nil, fmt.Errorf("internal conn %s=%s: %w", name, addr, err)
		}
		r.routes[name] = c
	}
	return r, nil
}

// ServiceToken is the bearer token of the internal service identity: role
// service, subject = the service (or process) that calls.
func ServiceToken(secret []byte, name string) (string, error) {
	return auth.Issue(secret, auth.RoleService, name, internalTokenTTL)
}

// DialInternal is a connection to addr whose every call carries name's
// service token (ServiceToken): the one way a service, the single binary or
// a test reaches another service's API as a service.
func DialInternal(secret []byte, addr, name string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	tok, err := ServiceToken(secret, name)
	if err != nil {
		return nil, err
	}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.BearerCreds(tok)),
		grpc.WithDefaultServiceConfig(internalServiceConfig),
		grpc.WithKeepaliveParams(internalKeepalive),
		grpc.WithChainUnaryInterceptor(markDownstream),
		// The caller's trace goes on in the called service (a client span
		// here, the server's own there).
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)
	return grpc.NewClient(addr, opts...)
}

// markDownstream marks the status a called service answers as
// apperr.Downstream, so the calling service's apperr.Public tells its own
// refusals from the callee's.
func markDownstream(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if _, ok := status.FromError(err); ok && err != nil {
		return &apperr.Downstream{Err: err}
	}
	return err
}
