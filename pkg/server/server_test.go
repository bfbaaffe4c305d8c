package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gpubill/gpubill/pkg/auth"
)

// TestReadyzHidesDetailWithoutToken: a failing dependency is "not ok" to
// anyone, and its error text only to an operator (finance, auditor, admin):
// a renter's, provider's or meter's valid token read it too.
func TestReadyzHidesDetailWithoutToken(t *testing.T) {
	secret := []byte("readyz-test-secret-0123456789abcdef")
	s, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Ready: []Check{
			{Name: "database", Check: func(context.Context) error { return nil }},
			{Name: "nats", Check: func(context.Context) error { return errors.New("dial tcp 10.1.2.3:4222: secret topology") }},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	tok, err := auth.Issue(secret, auth.RoleAuditor, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	get := func(token string) (int, map[string]string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out := map[string]string{}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	renter, err := auth.Issue(secret, auth.RoleRenter, "r-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "not-a-token", renter} {
		code, out := get(tok)
		if code != http.StatusServiceUnavailable || out["database"] != "ok" || out["nats"] != "not ok" || len(out) != 2 {
			t.Errorf("token %q: HTTP %d %v; want 503, database ok, nats \"not ok\"", tok, code, out)
		}
	}
	if code, out := get(tok); code != http.StatusServiceUnavailable || out["nats"] != "not ok: dial tcp 10.1.2.3:4222: secret topology" {
		t.Errorf("with a token: HTTP %d %v; want the error's text", code, out)
	}
}

func TestJSONPathAt(t *testing.T) {
	body := `{"a": 1, "postings": [{"account": "x", "amount": 5}, {"amount": {"k": [1, true]}}], "meta": {"t": "v"}}`
	tests := []struct {
		give string // a unique substring; the offset is its start
		want string
	}{
		{`1,`, "a"},
		{`"x"`, "postings[0].account"},
		{`5}`, "postings[0].amount"},
		{`{"k"`, "postings[1].amount"},
		{`true`, "postings[1].amount.k[1]"},
		{`"v"`, "meta.t"},
		{`"postings"`, "postings"},
	}
	for _, tt := range tests {
		off := strings.Index(body, tt.give)
		if got := jsonPathAt([]byte(body), off); got != tt.want {
			t.Errorf("at %q: %q, want %q", tt.give, got, tt.want)
		}
	}
	// A protojson error names the field by its position.
	err := bodyError([]byte("{\n \"name\": 5}"), `proto: (line 2:10): invalid value for string field name: 5`)
	if err.Error() != "invalid name: invalid value for string field name: 5" {
		t.Errorf("bodyError: %v", err)
	}
	if err := bodyError([]byte(`{"a":`), "proto: unexpected EOF"); err.Error() != "invalid body: unexpected EOF" {
		t.Errorf("bodyError without position: %v", err)
	}
	// A position past what an int holds names no field: the body, not the
	// field at a clamped offset (here the end, inside "a").
	if err := bodyError([]byte(`{"a": {"b": `), "proto: (line 99999999999999999999:1): unexpected EOF"); err.Error() != "invalid body: unexpected EOF" {
		t.Errorf("bodyError with an overflowing position: %v", err)
	}
}

func TestStartRefusesShortSecret(t *testing.T) {
	_, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Secret: []byte("0123456789abcdef0123456789abcde"), Log: slog.Default()})
	if err == nil || !strings.Contains(err.Error(), "32") {
		t.Fatalf("Start with a 31-byte secret: %v, want a refusal naming the 32-byte minimum", err)
	}
}

func TestClientAddr(t *testing.T) {
	proxy := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
	tests := []struct {
		name    string
		remote  string
		xff     string
		trusted []netip.Prefix
		want    string
	}{
		{"direct", "203.0.113.1:5000", "", nil, "203.0.113.1"},
		{"forged header, no trusted proxy", "203.0.113.1:5000", "10.9.9.9", nil, "203.0.113.1"},
		{"forged header, peer not a proxy", "203.0.113.1:5000", "10.9.9.9", proxy, "203.0.113.1"},
		{"through the proxy", "10.0.0.5:5000", "198.51.100.7", proxy, "198.51.100.7"},
		{"client prepends a lie", "10.0.0.5:5000", "10.9.9.9, 198.51.100.7", proxy, "198.51.100.7"},
		{"two proxies", "10.0.0.5:5000", "198.51.100.7, 10.0.0.6", proxy, "198.51.100.7"},
		{"garbled chain", "10.0.0.5:5000", "nonsense", proxy, "invalid IP"},
		{"ipv6 peer", "[2001:db8::1]:5000", "", nil, "2001:db8::1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		if got := ClientAddr(r, tt.trusted).String(); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// routedService is a service with a plain HTTP route and nothing else.
type routedService struct{}

func (routedService) RegisterGRPC(grpc.ServiceRegistrar) {}
func (routedService) RegisterGateway(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error {
	return nil
}
func (routedService) Policy() auth.Policy { return auth.Policy{} }
func (routedService) HTTPRoutes() map[string]http.Handler {
	return map[string]http.Handler{"POST /v1/notify/test": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write(append([]byte("got "), b...))
	})}
}

// A service's plain HTTP routes are served beside the gateway, behind the
// edge (request id), without a bearer token.
func TestServiceHTTPRoutes(t *testing.T) {
	s, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Secret: []byte("routes-test-secret-0123456789abcdef"), Log: slog.New(slog.DiscardHandler), Services: []Service{routedService{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	resp, err := http.Post("http://"+s.HTTPAddr+"/v1/notify/test", "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || string(b) != `got {"a":1}` || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("HTTP %d %q (request id %q); want 200 with the body echoed and a request id", resp.StatusCode, b, resp.Header.Get("X-Request-Id"))
	}
}

// TestListenerSparesTheTextWalk: the server's listener decodes with
// textCodec and forgets every request it noted, unary or streamed,
// answered or refused.
func TestListenerSparesTheTextWalk(t *testing.T) {
	s, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Secret: []byte("listener-test-secret-0123456789abcdef"), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	before := textWalks.Load()
	_, checkErr := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "gpubill"})
	if walks := textWalks.Load() - before; walks != 0 {
		t.Errorf("a clean request over the listener was walked %d times (Check: %v)", walks, checkErr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "gpubill"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the stream's first answer: the request was received
		t.Fatal(err)
	}
	cancel()
	pollUntil(t, func() bool {
		left := 0
		cleanText.Range(func(k, _ any) bool { left++; return true })
		return left == 0
	}, "requests left noted after their calls ended")
}

// pollUntil polls cond for up to 5 s.
func pollUntil(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}
