package simulate

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An answer cut short is an error, not a success: a 200 whose body ends
// early says nothing reliable about what the stack did.
func TestClientAnswerCutShort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"ok":`)) // then the connection ends
	}))
	defer srv.Close()
	c := &client{base: srv.URL, token: "t", http: srv.Client()}
	if err := c.post(context.Background(), "/v1/deposits", map[string]string{"amount": "1.00"}, nil); err == nil {
		t.Fatal("a 200 cut short after 6 of 100 bytes was taken for a success")
	}
}

// A stop the ledger requested before the simulation restarted is read from
// the thin renter's wallet (the ledger does not announce it again): the
// renter stays stopped until its rescue top-up. It ran on, charged past its
// credit limit, and the rescue never came.
func TestThinRenterStoppedBeforeARestart(t *testing.T) {
	for _, tc := range []struct {
		control string
		want    bool
	}{{"stopped", true}, {"warned", false}, {"ok", false}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/renters/"+thinRenter+"/wallet" {
				http.NotFound(w, r)
				return
			}
			w.Write([]byte(`{"renter_id":"` + thinRenter + `","balances":[{"currency":"CNY","lease_control":"` + tc.control + `"}]}`))
		}))
		lease, err := NewLeaseReceiver(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		c := &client{base: srv.URL, token: "t", http: srv.Client()}
		if err := thinStoppedBefore(context.Background(), c, lease); err != nil {
			t.Fatal(err)
		}
		if got := lease.Stopped(thinRenter); got != tc.want {
			t.Errorf("wallet lease_control %q: stopped %v, want %v", tc.control, got, tc.want)
		}
		lease.Close()
		srv.Close()
	}
}
