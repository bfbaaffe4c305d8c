package auth

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func callWith(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}

// A remembered token is still refused once it expires, and a token is
// remembered only by the guard (secret) that verified it; an altered token
// is verified afresh and refused.
func TestTokenCacheKeepsTheChecks(t *testing.T) {
	const method = "/gpubill.payout.v1.PayoutService/GetPayout"
	g := Guard{Secret: secret, Policy: Policy{method: {RoleProvider}}, Tokens: &TokenCache{}}
	tok, err := Issue(secret, RoleProvider, "p-001", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // verified, then remembered
		if p, err := g.Authorize(callWith(tok), method); err != nil || p.Subject != "p-001" {
			t.Fatalf("Authorize = %+v, %v", p, err)
		}
	}
	if len(g.Tokens.m) != 1 {
		t.Fatalf("remembered %d tokens, want 1", len(g.Tokens.m))
	}
	other := Guard{Secret: []byte("another-secret-0123456789abcdef01234"), Policy: g.Policy, Tokens: &TokenCache{}}
	if _, err := other.Authorize(callWith(tok), method); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a guard with another secret: %v", err)
	}
	altered := tok[:len(tok)-2] + "AA"
	if _, err := g.Authorize(callWith(altered), method); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an altered token: %v", err)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(3 * time.Second)))
	if _, err := g.Authorize(callWith(tok), method); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an expired remembered token: %v", err)
	}
}

// The cache stays within Max, dropping expired tokens first.
func TestTokenCacheIsBounded(t *testing.T) {
	now := time.Now()
	c := &TokenCache{Max: 10, Now: func() time.Time { return now }}
	for i := range 100 {
		c.put(string(rune('a'+i%26))+string(rune(i)), Principal{Role: RoleFinance}, now.Add(time.Hour))
	}
	if len(c.m) > 10 {
		t.Fatalf("%d tokens kept, max 10", len(c.m))
	}
}
