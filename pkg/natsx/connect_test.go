package natsx_test

import (
	"net"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/natsx"
)

// NATS_URL may carry its credentials (nats://user:pass@host,
// nats://TOKEN@host): a failed connection at start-up quoted them in its
// error. It names the servers, not the credentials.
func TestConnectErrorHidesCredentials(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused from now on
	_, _, err = natsx.Connect("nats://gpubill:pw-s3cret@"+addr+",nats://tok-s3cret@"+addr, "gpubill-test")
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("connect to a closed port: %v; want an error naming %s without the credentials", err, addr)
	}
}

// A URL that does not parse (a password with a bare "%", a token with a
// space) is not quoted either: nats's own parse error quotes it whole.
func TestConnectErrorOfAnUnparsableURLHidesCredentials(t *testing.T) {
	for _, u := range []string{"nats://gpubill:pw%zzs3cret@127.0.0.1:1", "nats://tok s3cret@127.0.0.1:1"} {
		if _, _, err := natsx.Connect(u, "gpubill-test"); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("connect to %q: %v; want an error without the credentials", strings.ReplaceAll(u, "s3cret", "…"), err)
		}
	}
}
