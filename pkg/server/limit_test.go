package server

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gpubill/gpubill/pkg/apperr"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
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

// TestListenerRefusesOverSizeUndecoded: the listener takes messages up to
// the statement upload's limit (64 MiB), so a request of any other type
// over its own limit is refused from its length, undecoded: a 401 without
// a token, RESOURCE_EXHAUSTED naming the limit with one, and no
// interceptor or method sees its fields. Decoded first, 64 MiB of empty
// elements of a repeated field is tens of millions of messages, before
// the guard.
func TestListenerRefusesOverSizeUndecoded(t *testing.T) {
	var seen sync.Map // request → its size as the chain saw it
	sizeSeen := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m, ok := req.(proto.Message); ok {
			seen.Store(ctx, proto.Size(m))
		}
		return handler(ctx, req)
	}
	conn := serveEcho(t, grpc.MaxRecvMsgSize(statementBytesMax), grpc.ForceServerCodecV2(newTextCodec()),
		grpc.ChainUnaryInterceptor(forgetText(), sizeSeen, needsToken, sizeLimit()))
	big := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: bytes.Repeat([]byte("x"), 2<<20)}}
	for _, tt := range []struct {
		name  string
		token bool
		want  codes.Code
	}{
		{"no token", false, codes.Unauthenticated},
		{"token", true, codes.ResourceExhausted},
	} {
		seen.Clear()
		ctx := context.Background()
		if tt.token {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer x")
		}
		_, err := testpb.NewTestServiceClient(conn).UnaryCall(ctx, big)
		if status.Code(err) != tt.want || (tt.token && !strings.Contains(err.Error(), "larger than 1048576 bytes")) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		seen.Range(func(_, v any) bool {
			if v.(int) != 0 {
				t.Errorf("%s: the chain saw a request of %d bytes decoded; want it undecoded", tt.name, v)
			}
			return true
		})
		if n := refusedCount(); n != 0 {
			t.Errorf("%s: %d refusals left noted", tt.name, n)
		}
	}
}

// TestRequestLimitsNameRealMessages: each type requestBytesMax gives a
// larger limit is a request message (a misspelt name left its calls at 1 MiB).
func TestRequestLimitsNameRealMessages(t *testing.T) {
	want := map[protoreflect.FullName]int{
		(&meteringv1.IngestUsageEventsRequest{}).ProtoReflect().Descriptor().FullName(): grpcIngestBytesMax,
		(&payoutv1.ImportBankFileRequest{}).ProtoReflect().Descriptor().FullName():      grpcIngestBytesMax,
		(&ledgerv1.ImportBankStatementRequest{}).ProtoReflect().Descriptor().FullName(): statementBytesMax,
	}
	if !maps.Equal(requestBytesMax, want) {
		t.Errorf("requestBytesMax %v, want %v", requestBytesMax, want)
	}
	if got := msgBytesMax(&ledgerv1.ImportBankStatementRequest{}); got != 64<<20 {
		t.Errorf("a statement's limit: %d, want 64 MiB", got)
	}
}
