package auth

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var secret = []byte("auth-test-secret-0123456789abcdef0123")

func TestIssueVerify(t *testing.T) {
	tok, err := Issue(secret, RoleProvider, "p-001", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Verify(secret, tok)
	if err != nil || p.Role != RoleProvider || p.Subject != "p-001" {
		t.Fatalf("got %+v %v", p, err)
	}
	if _, err := Verify([]byte("another-secret-0123456789abcdef01234"), tok); err == nil {
		t.Fatal("token verified with another secret")
	}
	if _, err := Issue(secret, RoleProvider, "", time.Hour); err == nil {
		t.Fatal("provider token without subject")
	}
	if _, err := Issue(secret, "root", "", time.Hour); err == nil {
		t.Fatal("unknown role accepted")
	}
	expired, err := signClaims(secret, RoleFinance, "", -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A token the services would refuse is not issued.
	for _, bad := range []struct {
		role, sub string
		ttl       time.Duration
	}{{RoleFinance, "", -time.Minute}, {RoleFinance, "", 0}, {RoleRenter, " ", time.Hour}, {RoleRenter, "r-001 ", time.Hour},
		{RoleProvider, "p:1", time.Hour}, {RoleService, " ops", time.Hour},
		{RoleMeter, "p:1", time.Hour}} { // a meter's subject is the provider it ingests for: no provider has this id
		if _, err := Issue(secret, bad.role, bad.sub, bad.ttl); err == nil {
			t.Errorf("Issue(%s, %q, %s): issued", bad.role, bad.sub, bad.ttl)
		}
	}
	if _, err := Verify(secret, expired); err == nil {
		t.Fatal("expired token accepted")
	}
	// A meter token names the provider it ingests for, or none (the
	// platform's meter, for every provider).
	for _, sub := range []string{"p-001", ""} {
		tok, err := Issue(secret, RoleMeter, sub, time.Hour)
		if err != nil {
			t.Fatalf("meter token with subject %q: %v", sub, err)
		}
		if p, err := Verify(secret, tok); err != nil || p.Role != RoleMeter || p.Subject != sub {
			t.Fatalf("meter token with subject %q: %+v %v", sub, p, err)
		}
	}
	svc, err := Issue(secret, RoleService, "settlement", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Verify(secret, svc); err != nil || p.Role != RoleService {
		t.Fatalf("service token: %+v %v", p, err)
	}
}

// sign makes a token with exactly these claims, bypassing Issue's checks.
func sign(t *testing.T, key []byte, role, sub string, aud []string) string {
	t.Helper()
	c := claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer, Subject: sub, Audience: aud,
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyRefuses(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"no audience", sign(t, secret, RoleFinance, "", nil), "aud"},
		{"another audience", sign(t, secret, RoleFinance, "", []string{"grafana"}), "aud"},
		{"provider without subject", sign(t, secret, RoleProvider, "", []string{Audience}), "subject"},
		{"renter with a blank subject", sign(t, secret, RoleRenter, " ", []string{Audience}), "subject"},
		{"unknown role", sign(t, secret, "root", "", []string{Audience}), "role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Verify(secret, tt.give); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want an error about %s", err, tt.want)
			}
		})
	}
	if _, err := Verify(secret, sign(t, secret, RoleFinance, "", []string{Audience})); err != nil {
		t.Fatalf("a well-formed token is refused: %v", err)
	}
}

func TestShortSecretRefused(t *testing.T) {
	short := []byte("0123456789abcdef0123456789abcde") // 31 bytes
	if _, err := Issue(short, RoleFinance, "", time.Hour); err == nil {
		t.Fatal("Issue signed with a 31-byte secret")
	}
	if _, err := Verify(short, sign(t, short, RoleFinance, "", []string{Audience})); err == nil {
		t.Fatal("Verify accepted a token under a 31-byte secret")
	}
	if _, err := LoadOrCreateSecret(string(short), t.TempDir()); err == nil {
		t.Fatal("LoadOrCreateSecret accepted a 31-byte configured secret")
	}
	s, err := LoadOrCreateSecret("", t.TempDir())
	if err != nil || len(s) < SecretBytesMin {
		t.Fatalf("generated secret %d bytes, %v", len(s), err)
	}
}

func TestAllowlist(t *testing.T) {
	a, err := AllowlistFromEnv(func(name string) string {
		return map[string]string{"GPUBILL_ALLOW_FINANCE": "10.0.0.0/8, 192.168.1.7", "GPUBILL_ALLOW_METER": "fd00::/8"}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		role, addr string
		ok         bool
	}{
		{RoleFinance, "10.1.2.3", true},
		{RoleFinance, "192.168.1.7", true},
		{RoleFinance, "192.168.1.8", false},
		{RoleFinance, "::ffff:10.1.2.3", true}, // IPv4-mapped
		{RoleFinance, "", false},               // unknown address
		{RoleMeter, "fd00::1", true},
		{RoleMeter, "10.1.2.3", false},
		{RoleAuditor, "203.0.113.9", true}, // no list: any address
	}
	for _, tt := range tests {
		addr, err := netip.ParseAddr(tt.addr)
		if err != nil && tt.addr != "" {
			t.Fatalf("address %q: %v", tt.addr, err)
		}
		if err := a.Check(tt.role, addr); (err == nil) != tt.ok {
			t.Errorf("%s from %q: %v, want allowed=%v", tt.role, tt.addr, err, tt.ok)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", " , "} {
		if _, err := AllowlistFromEnv(func(string) string { return bad }); err == nil {
			t.Errorf("allowlist %q accepted", bad)
		}
	}
}

// TestInterceptorAllowlistAndGatewayAddress: the allowlist applies to the
// gRPC peer; a client address stated in metadata counts only with the
// process's gateway key, so a remote gRPC caller cannot claim one.
func TestInterceptorAllowlistAndGatewayAddress(t *testing.T) {
	const method = "/gpubill.ledger.v1.LedgerService/GetAccount"
	g := Guard{Secret: secret, Policy: Policy{method: {RoleFinance}}, GatewayKey: "k3y",
		Allow: Allowlist{RoleFinance: {netip.MustParsePrefix("10.0.0.0/8")}}}
	tok, err := Issue(secret, RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	call := func(peerAddr string, md ...string) codes.Code {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(peerAddr), Port: 4000}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(append([]string{"authorization", "Bearer " + tok}, md...)...))
		_, err := g.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return "ok", nil })
		return status.Code(err)
	}
	tests := []struct {
		name string
		peer string
		md   []string
		want codes.Code
	}{
		{"peer inside", "10.9.9.9", nil, codes.OK},
		{"peer outside", "203.0.113.5", nil, codes.PermissionDenied},
		{"outside peer claims an inside address", "203.0.113.5", []string{ClientAddrHeader, "10.1.1.1"}, codes.PermissionDenied},
		{"claim with a wrong gateway key", "127.0.0.1", []string{GatewayKeyHeader, "guess", ClientAddrHeader, "10.1.1.1"}, codes.PermissionDenied},
		{"gateway states an inside client", "127.0.0.1", []string{GatewayKeyHeader, "k3y", ClientAddrHeader, "10.1.1.1"}, codes.OK},
		{"gateway states an outside client", "10.0.0.1", []string{GatewayKeyHeader, "k3y", ClientAddrHeader, "203.0.113.5"}, codes.PermissionDenied},
	}
	for _, tt := range tests {
		if got := call(tt.peer, tt.md...); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
