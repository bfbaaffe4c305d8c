package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// needsToken stands for the guard: a call without authorization metadata
// is refused as unauthenticated.
func needsToken(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "authorization")) == 0 {
		return nil, status.Error(codes.Unauthenticated, "missing Authorization")
	}
	return handler(ctx, req)
}

// refusedCount is how many requests are noted refused.
func refusedCount() int {
	n := 0
	refused.Range(func(any, any) bool { n++; return true })
	return n
}

// TestLimitRefusesUndecodedAfterTheGuard: a request its type's LimitWith
// check refuses is not decoded, and its call is answered after the guard:
// a 401 without a token, the check's error (a 400 naming the field) with
// one, the method never called, on the gateway's channel and on the
// listener; no refusal stays noted once the call ends.
func TestLimitRefusesUndecodedAfterTheGuard(t *testing.T) {
	check := func(b []byte) error {
		if bytes.Contains(b, []byte("too-many")) {
			return apperr.Invalid("response_status", "too many")
		}
		return nil
	}
	LimitWith[*testpb.SimpleRequest](check, check)
	t.Cleanup(func() { requestLimits.Delete((&testpb.SimpleRequest{}).ProtoReflect().Descriptor().FullName()) })
	want := map[bool]codes.Code{false: codes.Unauthenticated, true: codes.InvalidArgument}

	in, _ := runtime.MarshalerForRequest(NewGatewayMux(slog.Default()), httptest.NewRequest("POST", "/v1/x", nil))
	c := newLocalChannel(chainUnary([]grpc.UnaryServerInterceptor{needsToken, sizeLimit()}), nil)
	testpb.RegisterTestServiceServer(c, echoServer{fail: status.Error(codes.Internal, "the method ran")})
	for token, code := range want {
		var req testpb.SimpleRequest
		if err := in.NewDecoder(strings.NewReader(`{"response_status":{"message":"too-many"}}`)).Decode(&req); err != nil {
			t.Fatal(err)
		}
		if req.ResponseStatus != nil {
			t.Errorf("gateway: the refused body was decoded: %v", &req)
		}
		ctx := context.Background()
		if token {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer x")
		}
		_, err := testpb.NewTestServiceClient(c).UnaryCall(ctx, &req)
		if status.Code(err) != code || (token && !strings.Contains(err.Error(), "too many")) {
			t.Errorf("gateway, token %v: %v, want %v", token, err, code)
		}
		if n := refusedCount(); n != 0 {
			t.Errorf("gateway, token %v: %d refusals left noted", token, n)
		}
	}

	// A refused request is empty: should it reach the method, it is
	// answered so (echoServer needs a payload).
	emptyReached := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*testpb.SimpleRequest); ok && r.Payload == nil {
			return nil, status.Error(codes.Internal, "an empty request reached the method")
		}
		return handler(ctx, req)
	}
	conn := serveEcho(t, grpc.ForceServerCodecV2(newTextCodec()), grpc.ChainUnaryInterceptor(forgetText(), needsToken, sizeLimit(), textGuard(), emptyReached))
	for token, code := range want {
		ctx := context.Background()
		if token {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer x")
		}
		_, err := testpb.NewTestServiceClient(conn).UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{}, ResponseStatus: &testpb.EchoStatus{Message: "too-many"}})
		if status.Code(err) != code || (token && !strings.Contains(err.Error(), "too many")) {
			t.Errorf("listener, token %v: %v, want %v", token, err, code)
		}
		if n := refusedCount(); n != 0 {
			t.Errorf("listener, token %v: %d refusals left noted", token, n)
		}
	}
	// What the check passes is served.
	res, err := testpb.NewTestServiceClient(conn).UnaryCall(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer y"),
		&testpb.SimpleRequest{Payload: &testpb.Payload{}, ResponseStatus: &testpb.EchoStatus{Message: "few"}})
	if err != nil || res.GetUsername() != "Bearer y" {
		t.Errorf("a request the check passes: %v, %v", res, err)
	}
}
