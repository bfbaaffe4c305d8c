package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
)

// TestSimulateRefusesAForeignStack: gpubill simulate reaching a stack it
// did not seed (production's gateway port-forwarded to the default URL)
// exits non-zero naming the foreign renter and the URL, and books nothing;
// --force runs it anyway.
func TestSimulateRefusesAForeignStack(t *testing.T) {
	var mu sync.Mutex
	var writes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet:
			mu.Lock()
			writes = append(writes, r.Method+" "+r.URL.Path)
			mu.Unlock()
			w.Write([]byte(`{}`))
		case r.URL.Path == "/v1/renters":
			w.Write([]byte(`{"renters":[{"renter_id":"r-001","name":"Renter r-001"},{"renter_id":"r-100","name":"Acme AI"}]}`))
		case r.URL.Path == "/v1/providers":
			w.Write([]byte(`{"providers":[]}`))
		case r.URL.Path == "/v1/rate-cards":
			w.Write([]byte(`{"rate_cards":[{}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	run := func(args ...string) (int, string, []string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // a run that proceeds ends here
		defer cancel()
		var out, errb bytes.Buffer
		code := cli.Main(ctx, append([]string{"simulate", "--url", srv.URL, "--tick", "1h",
			"--auth-secret", "simulate-command-test-secret-0123456789"}, args...), &out, &errb)
		mu.Lock()
		defer mu.Unlock()
		w := writes
		writes = nil
		return code, errb.String(), w
	}
	code, stderr, w := run()
	if code == 0 || !strings.Contains(stderr, "r-100") || !strings.Contains(stderr, srv.URL) || len(w) != 0 {
		t.Fatalf("simulate against a stack holding r-100: exit %d, stderr %q, writes %v; want a refusal naming r-100 and %s, no writes",
			code, stderr, w, srv.URL)
	}
	code, stderr, w = run("--force")
	if code != 0 || !strings.Contains(strings.Join(w, " "), "POST /v1/deposits") {
		t.Fatalf("simulate --force: exit %d, stderr %q, writes %v; want it to seed and deposit", code, stderr, w)
	}
}
