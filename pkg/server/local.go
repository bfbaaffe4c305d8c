package server

import (
	"context"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// localChannel is how the REST gateway reaches the services: a unary call
// runs the method's generated handler in the calling goroutine, under the
// same interceptor chain and stats handler as a call that arrives on the
// gRPC listener, without a socket, HTTP/2 framing or wire encoding in
// between. The method sees what it would see over gRPC: a request of its own
// (a copy of the gateway's, made once the chain passes the call; the
// interceptors see the gateway's), the gateway's metadata as incoming metadata,
// none of the gateway's context values, its deadline and cancellation; the
// headers and trailers it sets reach the gateway's call options. Its text is
// checked before the chain (checkText). The gateway routes no streaming
// method, so a stream answers Unimplemented.
//
// grpchan's inprocgrpc does the same and streams too, but it brings the
// deprecated github.com/golang/protobuf and jhump/protoreflect's dynamic
// messages into every binary and runs each call on a goroutine of its own.
type localChannel struct {
	methods   map[string]localMethod // by full name, "/gpubill.ledger.v1.LedgerService/CreateTransaction"
	intercept grpc.UnaryServerInterceptor
	stats     stats.Handler
}

type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

func newLocalChannel(intercept grpc.UnaryServerInterceptor, sh stats.Handler) *localChannel {
	return &localChannel{methods: map[string]localMethod{}, intercept: intercept, stats: sh}
}

// RegisterService implements grpc.ServiceRegistrar (before the first call).
func (c *localChannel) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
}

// Invoke implements grpc.ClientConnInterface.
func (c *localChannel) Invoke(ctx context.Context, method string, req, reply any, opts ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	in, inOK := req.(proto.Message)
	out, outOK := reply.(proto.Message)
	if !inOK || !outOK {
		return status.Errorf(codes.Internal, "%s: request and answer must be protobuf messages", method)
	}
	// Before the chain, as when a path parameter with invalid UTF-8
	// (percent-encoded) failed to marshal on its way to the listener: refused
	// as invalid whoever calls. textGuard does not walk the request again.
	if err := checkText(in); err != nil {
		return apperr.ToStatus(err)
	}
	st := &localStream{method: method}
	sctx := grpc.NewContextWithServerTransportStream(serverContext(ctx), st)
	began := time.Now()
	if c.stats != nil {
		sctx = c.stats.TagRPC(sctx, &stats.RPCTagInfo{FullMethodName: method})
		c.stats.HandleRPC(sctx, &stats.Begin{BeginTime: began})
	}
	// The chain runs on the gateway's request, the method on a copy made
	// inside it (methodCall), so a caller the guard refuses has no copy
	// made of its request. A request LimitWith refused reaches the chain
	// undecoded and empty, and is answered there, after the guard
	// (sizeLimit).
	defer refused.Delete(in)
	info := &grpc.UnaryServerInfo{Server: m.impl, FullMethod: method}
	call := methodCall(method, m)
	var resp any
	var err error
	if c.intercept != nil {
		resp, err = c.intercept(sctx, in, info, call)
	} else {
		resp, err = call(sctx, in)
	}
	if err == nil {
		a, ok := resp.(proto.Message)
		switch {
		case !ok || reflect.TypeOf(a) != reflect.TypeOf(out):
			err = status.Errorf(codes.Internal, "%s: answer of type %T, caller wants %T", method, resp, reply)
		default:
			proto.Merge(out, a)
		}
	}
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.FromContextError(err).Err() // as the gRPC server sends it
		}
	}
	if c.stats != nil {
		c.stats.HandleRPC(sctx, &stats.End{BeginTime: began, EndTime: time.Now(), Error: err})
	}
	st.deliver(opts)
	return err
}

// methodCall is the innermost handler of a call of method: it copies the
// request it is handed (the generated handler's dec, which on the listener
// decodes; the handler runs no interceptor of its own) and runs the method
// on the copy.
func methodCall(method string, m localMethod) grpc.UnaryHandler {
	return func(ctx context.Context, req any) (any, error) {
		if err := refusal(req); err != nil { // a chain without sizeLimit: still refused
			return nil, apperr.ToStatus(err)
		}
		src, ok := req.(proto.Message)
		if !ok {
			return nil, status.Errorf(codes.Internal, "%s: request of type %T is no protobuf message", method, req)
		}
		dec := func(dst any) error {
			d, ok := dst.(proto.Message)
			if !ok || reflect.TypeOf(d) != reflect.TypeOf(src) {
				return status.Errorf(codes.Internal, "%s: request of type %T, handler wants %T", method, src, dst)
			}
			proto.Merge(d, src)
			return nil
		}
		return m.handler(m.impl, ctx, dec, nil)
	}
}

// NewStream implements grpc.ClientConnInterface: no streaming method is
// routed through the gateway.
func (c *localChannel) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "%s: streams are not served in process", method)
}

// localPeer is the peer a gateway call comes from. Guard.ClientAddr takes
// the HTTP client's address from the gateway's metadata instead.
var localPeer = &peer.Peer{Addr: localAddr{}, LocalAddr: localAddr{}}

type localAddr struct{}

func (localAddr) Network() string { return "inproc" }
func (localAddr) String() string  { return "gateway" }

// serverContext is the context a method sees: ctx's deadline and
// cancellation, its outgoing metadata as incoming, and none of its values
// (a call over gRPC carries none).
func serverContext(ctx context.Context) context.Context {
	sctx := context.Context(noValues{ctx})
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		sctx = metadata.NewIncomingContext(sctx, md)
	}
	return peer.NewContext(sctx, localPeer)
}

type noValues struct{ context.Context }

func (noValues) Value(any) any { return nil }

// localStream collects the headers and trailers a method sets.
type localStream struct {
	method string

	mu              sync.Mutex
	header, trailer metadata.MD
}

func (s *localStream) Method() string { return s.method }

func (s *localStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *localStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *localStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// deliver hands the headers and trailers to the caller's grpc.Header and
// grpc.Trailer options.
func (s *localStream) deliver(opts []grpc.CallOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = s.header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = s.trailer
		case grpc.PeerCallOption:
			*o.PeerAddr = *localPeer
		}
	}
}

// chainUnary is the interceptors as one, the first outermost (as
// grpc.ChainUnaryInterceptor orders them).
func chainUnary(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(interceptors) - 1; i >= 0; i-- {
			ic, inner := interceptors[i], next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, inner) }
		}
		return next(ctx, req)
	}
}
