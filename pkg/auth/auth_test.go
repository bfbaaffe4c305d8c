package auth

import (
	"testing"
	"time"
)

func TestIssueVerify(t *testing.T) {
	secret := []byte("s3cret")
	tok, err := Issue(secret, RoleProvider, "p-001", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Verify(secret, tok)
	if err != nil || p.Role != RoleProvider || p.Subject != "p-001" {
		t.Fatalf("got %+v %v", p, err)
	}
	if _, err := Verify([]byte("other"), tok); err == nil {
		t.Fatal("token verified with another secret")
	}
	if _, err := Issue(secret, RoleProvider, "", time.Hour); err == nil {
		t.Fatal("provider token without subject")
	}
	if _, err := Issue(secret, "root", "", time.Hour); err == nil {
		t.Fatal("unknown role accepted")
	}
	expired, _ := Issue(secret, RoleFinance, "", -time.Minute)
	if _, err := Verify(secret, expired); err == nil {
		t.Fatal("expired token accepted")
	}
}
