package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStack answers the REST routes the simulation reads (party listings,
// paged by id as the metering service pages them; rate cards) and records
// every write it is sent, answering 200.
type fakeStack struct {
	mu        sync.Mutex
	renters   [][2]string // id, name; sorted by id
	providers [][2]string
	writes    []string // "POST /v1/deposits r-001"
	listFails bool     // the party listings answer 403
}

func (f *fakeStack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		var body struct {
			RenterID string `json:"renter_id"`
		}
		json.NewDecoder(r.Body).Decode(&body) //nolint:errcheck // only recorded
		f.mu.Lock()
		f.writes = append(f.writes, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+body.RenterID))
		f.mu.Unlock()
		w.Write([]byte(`{}`))
		return
	}
	if f.listFails && (r.URL.Path == "/v1/renters" || r.URL.Path == "/v1/providers") {
		http.Error(w, `{"code":7,"message":"forbidden"}`, http.StatusForbidden)
		return
	}
	switch r.URL.Path {
	case "/v1/renters":
		f.list(w, r, "renters", "renter_id", f.renters)
	case "/v1/providers":
		f.list(w, r, "providers", "provider_id", f.providers)
	case "/v1/rate-cards":
		w.Write([]byte(`{"rate_cards":[{}]}`))
	case "/v1/renters/" + thinRenter + "/wallet":
		w.Write([]byte(`{"balances":[]}`))
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeStack) list(w http.ResponseWriter, r *http.Request, key, idKey string, all [][2]string) {
	size, err := strconv.Atoi(r.URL.Query().Get("page_size"))
	if err != nil || size <= 0 || size > 2 {
		size = 2 // small pages, so paging is exercised
	}
	after := r.URL.Query().Get("page_token")
	var page []map[string]string
	next := ""
	for _, p := range all {
		if p[0] <= after {
			continue
		}
		if len(page) == size {
			next = page[size-1][idKey]
			break
		}
		page = append(page, map[string]string{idKey: p[0], "name": p[1]})
	}
	json.NewEncoder(w).Encode(map[string]any{key: page, "next_page_token": next}) //nolint:errcheck // test server
}

func (f *fakeStack) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.writes)
}

// simRenters and simProviders are the parties a simulation run created,
// as the stack lists them.
func simRenters() [][2]string {
	return [][2]string{{"r-001", "Renter r-001"}, {"r-002", "Renter r-002"}, {"r-003", "Renter r-003"},
		{thinRenter, "Night-shift Render Studio"}}
}

func simProviders() [][2]string {
	var ps [][2]string
	for _, p := range providers {
		ps = append(ps, [2]string{p.ID, p.Name})
	}
	return ps
}

// runSim runs the simulation against f until its initial deposits are
// booked (or it returns), and returns Run's error.
func runSim(t *testing.T, f *fakeStack, force bool) (string, error) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{BaseURL: srv.URL, Token: "t", Tick: time.Hour, Force: force,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(f.written(), "POST /v1/deposits r-003") {
		select {
		case err := <-done:
			return srv.URL, err
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no initial deposit for r-003 within 10s; writes %v", f.written())
		}
	}
	cancel()
	return srv.URL, <-done
}

// A production gateway reached by mistake (a port-forward on the default
// URL) holds real renters and providers: the simulation books deposits with
// no money behind them, so it refuses, names what it found and where, and
// writes nothing. A simulation id carrying another name is not the
// simulation's party either (seeding takes its 409 for "already there").
func TestRefusesAStackWithForeignParties(t *testing.T) {
	for _, tt := range []struct {
		name          string
		giveRenters   [][2]string
		giveProviders [][2]string
		want          []string
	}{
		{"foreign renter", append(simRenters(), [2]string{"r-100", "Acme AI"}), simProviders(), []string{"r-100"}},
		{"foreign renter sorting first", append([][2]string{{"acme", "Acme AI"}}, simRenters()...), nil, []string{"acme"}},
		{"foreign provider", nil, append(simProviders(), [2]string{"p-900", "Real GPUs Ltd"}), []string{"p-900"}},
		{"simulation id, other name", [][2]string{{"r-002", "Real Customer Ltd"}}, simProviders(), []string{"r-002"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeStack{renters: tt.giveRenters, providers: tt.giveProviders}
			url, err := runSim(t, f, false)
			if err == nil {
				t.Fatalf("ran against a stack holding %v; writes %v", tt.want, f.written())
			}
			for _, w := range append(tt.want, url, "--force") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if w := f.written(); len(w) != 0 {
				t.Errorf("refused, yet wrote %v", w)
			}
		})
	}
}

// --force runs against such a stack anyway; a stack holding nothing or
// only the simulation's own parties (make run twice on one database) needs
// no force.
func TestRunsAgainstItsOwnStackOrWithForce(t *testing.T) {
	for _, tt := range []struct {
		name          string
		giveRenters   [][2]string
		giveProviders [][2]string
		giveForce     bool
	}{
		{"fresh stack", nil, nil, false},
		{"only the simulation's parties", simRenters(), simProviders(), false},
		{"foreign renter, forced", append(simRenters(), [2]string{"r-100", "Acme AI"}), simProviders(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeStack{renters: tt.giveRenters, providers: tt.giveProviders}
			if _, err := runSim(t, f, tt.giveForce); err != nil {
				t.Fatalf("simulation refused or failed: %v", err)
			}
			for _, r := range renters {
				if !slices.Contains(f.written(), "POST /v1/deposits "+r) {
					t.Errorf("no initial deposit for %s; writes %v", r, f.written())
				}
			}
		})
	}
}

// A stack whose parties cannot be listed (a token refused, an older
// gateway) is not known to be the simulation's own: refused, nothing
// written. More foreign ids than the refusal names end in "…".
func TestRefusesAStackItCannotCheck(t *testing.T) {
	f := &fakeStack{listFails: true}
	if _, err := runSim(t, f, false); err == nil || !strings.Contains(err.Error(), "403") || len(f.written()) != 0 {
		t.Fatalf("listing refused: err %v, writes %v; want a refusal naming the 403 and no writes", err, f.written())
	}
	many := &fakeStack{}
	for i := range foreignShowMax + 2 {
		many.renters = append(many.renters, [2]string{fmt.Sprintf("c-%03d", i), "Customer"})
	}
	_, err := runSim(t, many, false)
	if err == nil || !strings.Contains(err.Error(), "c-004, …") || strings.Contains(err.Error(), "c-005") {
		t.Fatalf("seven foreign renters: %v; want c-000..c-004 named, then …", err)
	}
}
