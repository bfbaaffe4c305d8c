package testkit

import (
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
)

// Token is a bearer token for role and subject sub signed with secret,
// valid for ttl (negative: already expired); a signing error fails t.
func Token(t testing.TB, secret []byte, role, sub string, ttl time.Duration) string {
	t.Helper()
	tok, err := auth.Issue(secret, role, sub, ttl)
	if err != nil {
		t.Fatalf("token for %s %q: %v", role, sub, err)
	}
	return tok
}
