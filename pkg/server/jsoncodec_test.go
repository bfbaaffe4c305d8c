package server

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
)

// TestJSONCodecsOnTheGateway: the REST mux's marshalers hand a registered
// type to its codec first, and protojson takes what the codec declines and
// every other type.
func TestJSONCodecsOnTheGateway(t *testing.T) {
	DecodeJSONWith(func(b []byte, m *testpb.SimpleRequest) bool {
		if string(b) != `{"fast": 1}` {
			return false // declined: protojson decodes it
		}
		m.ResponseSize = 42
		return true
	})
	EncodeJSONWith(func(b []byte, m *testpb.SimpleResponse) ([]byte, bool) {
		if m.GetUsername() == "slow" {
			return b, false
		}
		return append(b, `{"fast":true}`...), true
	})
	t.Cleanup(func() {
		jsonDecoders.Delete((&testpb.SimpleRequest{}).ProtoReflect().Descriptor().FullName())
		jsonEncoders.Delete((&testpb.SimpleResponse{}).ProtoReflect().Descriptor().FullName())
	})
	in, out := runtime.MarshalerForRequest(NewGatewayMux(slog.Default()), httptest.NewRequest("POST", "/v1/x", nil))

	decode := func(body string, m proto.Message) {
		t.Helper()
		if err := in.NewDecoder(strings.NewReader(body)).Decode(m); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	var req testpb.SimpleRequest
	if decode(`{"fast": 1}`, &req); req.GetResponseSize() != 42 {
		t.Errorf("a body the codec takes: %v, want response_size 42", &req)
	}
	if decode(`{"response_size": 7, "fast": 1}`, &req); req.GetResponseSize() != 7 {
		t.Errorf("a body the codec declines: %v, want protojson's response_size 7", &req)
	}
	var other testpb.Payload
	if decode(`{"body": "eA=="}`, &other); string(other.GetBody()) != "x" {
		t.Errorf("another type: %v, want protojson's body", &other)
	}

	encode := func(m proto.Message) string {
		t.Helper()
		b, err := out.Marshal(m)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		return string(b)
	}
	if got := encode(&testpb.SimpleResponse{Username: "a"}); got != `{"fast":true}` {
		t.Errorf("an answer the codec takes: %s", got)
	}
	if got := encode(&testpb.SimpleResponse{Username: "slow"}); !strings.Contains(got, `"username":`) || !strings.Contains(got, `"oauth_scope":`) {
		t.Errorf("an answer the codec declines: %s, want protojson's (proto names, every field)", got)
	}
	if got := encode(&testpb.Payload{Body: []byte("x")}); !strings.Contains(got, `"eA=="`) {
		t.Errorf("another type: %s, want protojson's", got)
	}
}
