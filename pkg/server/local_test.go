package server

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// echoServer answers UnaryCall with what it saw: the caller's
// authorization metadata as the username, and whether a value of the
// caller's context reached it as the OAuth scope.
type echoServer struct {
	testpb.UnimplementedTestServiceServer
	fail error
}

type callerKey struct{}

func (s echoServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	req.Payload.Body = nil // the method's own copy: the caller's must not change
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-request-id", "r-1")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t-1")); err != nil {
		return nil, err
	}
	res := &testpb.SimpleResponse{}
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) == 1 {
		res.Username = v[0]
	}
	if ctx.Value(callerKey{}) != nil {
		res.OauthScope = "leaked"
	}
	return res, nil
}

func newEchoChannel(fail error, trace *[]string) *localChannel {
	mark := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			*trace = append(*trace, name+" "+info.FullMethod)
			return h(ctx, req)
		}
	}
	c := newLocalChannel(chainUnary([]grpc.UnaryServerInterceptor{mark("outer"), mark("inner")}), nil)
	testpb.RegisterTestServiceServer(c, echoServer{fail: fail})
	return c
}

// TestLocalChannelIsACallOverGRPC: the gateway's in-process calls run the
// server's interceptors in order, carry metadata but no context values,
// copy the request, and hand back headers, trailers and the answer.
func TestLocalChannelIsACallOverGRPC(t *testing.T) {
	var trace []string
	client := testpb.NewTestServiceClient(newEchoChannel(nil, &trace))
	ctx := metadata.AppendToOutgoingContext(context.WithValue(context.Background(), callerKey{}, 1), "authorization", "Bearer x")
	req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("body")}}
	var header, trailer metadata.MD
	res, err := client.UnaryCall(ctx, req, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	method := "/grpc.testing.TestService/UnaryCall"
	if want := []string{"outer " + method, "inner " + method}; !slices.Equal(trace, want) {
		t.Errorf("interceptors ran %q, want %q", trace, want)
	}
	if res.Username != "Bearer x" {
		t.Errorf("method saw authorization %q, want the caller's outgoing metadata", res.Username)
	}
	if res.OauthScope != "" {
		t.Error("a value of the caller's context reached the method")
	}
	if string(req.Payload.GetBody()) != "body" {
		t.Errorf("the method changed the caller's request (payload %q)", req.Payload.GetBody())
	}
	if got := header.Get("x-request-id"); !slices.Equal(got, []string{"r-1"}) {
		t.Errorf("header x-request-id %q, want [r-1]", got)
	}
	if got := trailer.Get("x-trailer"); !slices.Equal(got, []string{"t-1"}) {
		t.Errorf("trailer x-trailer %q, want [t-1]", got)
	}
}

// TestLocalChannelErrorsAreStatuses: what the gRPC server would send.
func TestLocalChannelErrorsAreStatuses(t *testing.T) {
	for _, c := range []struct {
		fail error
		want codes.Code
	}{
		{status.Error(codes.NotFound, "no such payout"), codes.NotFound},
		{errors.New("plain"), codes.Unknown},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
	} {
		var trace []string
		_, err := testpb.NewTestServiceClient(newEchoChannel(c.fail, &trace)).UnaryCall(context.Background(), &testpb.SimpleRequest{Payload: &testpb.Payload{}})
		if got := status.Code(err); got != c.want {
			t.Errorf("handler error %v: code %s, want %s", c.fail, got, c.want)
		}
	}
	var trace []string
	err := newEchoChannel(nil, &trace).Invoke(context.Background(), "/grpc.testing.TestService/NoSuchCall", &testpb.Empty{}, &testpb.Empty{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unregistered method: %v, want Unimplemented", err)
	}
	if _, err := newEchoChannel(nil, &trace).NewStream(context.Background(), &grpc.StreamDesc{}, "/grpc.testing.TestService/FullDuplexCall"); status.Code(err) != codes.Unimplemented {
		t.Errorf("stream: %v, want Unimplemented", err)
	}
}

// TestLocalChannelChecksTextFirst: a request with a NUL byte is refused as
// invalid, naming the field, before any interceptor runs (an unauthenticated
// caller learns nothing else), as when it failed to marshal on its way to
// the listener; textGuard then lets the gateway's calls through unwalked.
func TestLocalChannelChecksTextFirst(t *testing.T) {
	var trace []string
	_, err := testpb.NewTestServiceClient(newEchoChannel(nil, &trace)).UnaryCall(context.Background(),
		&testpb.SimpleRequest{Payload: &testpb.Payload{}, ResponseStatus: &testpb.EchoStatus{Message: "a\x00b"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "response_status.message") {
		t.Errorf("NUL in a field: %v, want InvalidArgument naming response_status.message", err)
	}
	if len(trace) != 0 {
		t.Errorf("interceptors ran before the text check: %q", trace)
	}
}

// serveEcho serves echoServer on a listener of its own with opts and
// returns a client connection to it; both end with the test.
func serveEcho(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(gs, echoServer{})
	go gs.Serve(lis) //nolint:errcheck // Stop ends it
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestTextGuardOnTheListener: a call that arrives on the gRPC listener is
// walked by textGuard (only the gateway's, already checked, are not).
func TestTextGuardOnTheListener(t *testing.T) {
	conn := serveEcho(t, grpc.ChainUnaryInterceptor(textGuard()))
	_, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(),
		&testpb.SimpleRequest{Payload: &testpb.Payload{}, ResponseStatus: &testpb.EchoStatus{Message: "a\x00b"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "response_status.message") {
		t.Errorf("NUL in a field over the listener: %v, want InvalidArgument naming response_status.message", err)
	}
}

// TestTextCodecSpareTheWalk: on the listener, a request whose bytes hold
// no zero byte is not walked; one holding a NUL is refused naming the
// field, and one with another zero byte (an empty nested message) is
// walked and served; no request stays noted once its call ends, whether
// textGuard took it or an interceptor before it refused the call.
func TestTextCodecSpareTheWalk(t *testing.T) {
	refuse := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*testpb.SimpleRequest); ok && r.GetResponseStatus().GetCode() == 7 {
			return nil, status.Error(codes.PermissionDenied, "refused before the text check")
		}
		return handler(ctx, req)
	}
	conn := serveEcho(t, grpc.ForceServerCodecV2(newTextCodec()), grpc.ChainUnaryInterceptor(forgetText(), refuse, textGuard()))
	client := testpb.NewTestServiceClient(conn)
	body := &testpb.Payload{Body: []byte("x")}
	call := func(r *testpb.SimpleRequest) (walks int64, err error) {
		before := textWalks.Load()
		_, err = client.UnaryCall(context.Background(), r)
		return textWalks.Load() - before, err
	}

	if walks, err := call(&testpb.SimpleRequest{Payload: body, ResponseSize: 3, ResponseStatus: &testpb.EchoStatus{Code: 2, Message: "plain text"}}); err != nil || walks != 0 {
		t.Errorf("clean request: %d walks, err %v; want 0 walks and an answer", walks, err)
	}
	if walks, err := call(&testpb.SimpleRequest{Payload: body, ResponseStatus: &testpb.EchoStatus{Code: 2, Message: "a\x00b"}}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "response_status.message") || walks != 1 {
		t.Errorf("NUL in a field: %d walks, %v; want 1 walk and InvalidArgument naming response_status.message", walks, err)
	}
	if walks, err := call(&testpb.SimpleRequest{Payload: &testpb.Payload{}, ResponseStatus: &testpb.EchoStatus{Code: 2, Message: "ok"}}); err != nil || walks != 1 {
		t.Errorf("empty nested message: %d walks, err %v; want 1 walk and an answer", walks, err)
	}
	if _, err := call(&testpb.SimpleRequest{Payload: body, ResponseStatus: &testpb.EchoStatus{Code: 7, Message: "clean"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused call: %v, want PermissionDenied", err)
	}
	left := 0
	cleanText.Range(func(k, _ any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d requests left noted after their calls ended", left)
	}
}

// TestDecodeChecksText: only messages that are proto3 all the way down
// have their text's UTF-8 checked by decoding.
func TestDecodeChecksText(t *testing.T) {
	if !decodeChecksText((&testpb.SimpleRequest{}).ProtoReflect().Descriptor()) {
		t.Error("grpc.testing.SimpleRequest (proto3) not taken as checked by decoding")
	}
	if decodeChecksText((&descriptorpb.FileDescriptorProto{}).ProtoReflect().Descriptor()) {
		t.Error("google.protobuf.FileDescriptorProto (proto2) taken as checked by decoding")
	}
}

// TestDecodeWithOnTheListener: a registered decoder decodes the requests
// it takes (the handler gets the message it filled, and the text check is
// still spared a clean one), and a request it declines is decoded by
// protobuf as before.
func TestDecodeWithOnTheListener(t *testing.T) {
	var filled atomic.Pointer[testpb.SimpleRequest]
	var bodies atomic.Int64
	DecodeWith(func(b []byte, m *testpb.SimpleRequest) bool {
		bodies.Add(1)
		var probe testpb.SimpleRequest
		if proto.Unmarshal(b, &probe) != nil || probe.GetResponseSize() != 2 {
			return false // declined: protobuf decodes it
		}
		proto.Merge(m, &probe)
		filled.Store(m)
		return true
	})
	t.Cleanup(func() { wireDecoders.Delete((&testpb.SimpleRequest{}).ProtoReflect().Descriptor().FullName()) })
	var seen atomic.Pointer[testpb.SimpleRequest]
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*testpb.SimpleRequest); ok {
			seen.Store(proto.Clone(r).(*testpb.SimpleRequest))
			if r == filled.Load() {
				seen.Load().ResponseType = 99 // marks the registered decoder's message
			}
		}
		return handler(ctx, req)
	}
	conn := serveEcho(t, grpc.ForceServerCodecV2(newTextCodec()), grpc.ChainUnaryInterceptor(forgetText(), record, textGuard()))
	client := testpb.NewTestServiceClient(conn)
	for _, size := range []int32{1, 2} {
		before := textWalks.Load()
		req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("x")}, ResponseSize: size, ResponseStatus: &testpb.EchoStatus{Code: 2, Message: "plain"}}
		if _, err := client.UnaryCall(context.Background(), req); err != nil {
			t.Fatalf("response_size %d: %v", size, err)
		}
		got := seen.Load()
		byDecoder := got.GetResponseType() == 99
		got.ResponseType = 0
		if !proto.Equal(got, req) {
			t.Errorf("response_size %d: the handler got %v, want %v", size, got, req)
		}
		if byDecoder != (size == 2) {
			t.Errorf("response_size %d: decoded by the registered decoder %v, want %v", size, byDecoder, size == 2)
		}
		if walks := textWalks.Load() - before; walks != 0 {
			t.Errorf("response_size %d: %d text walks of a clean request, want 0", size, walks)
		}
	}
	if bodies.Load() != 2 {
		t.Errorf("the registered decoder saw %d requests, want 2", bodies.Load())
	}
}
