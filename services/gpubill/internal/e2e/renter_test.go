package e2e

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
	"github.com/gpubill/gpubill/services/ledger"
)

const leaseSecret = "lease-control-secret-0123456789abcdef"

// scheduler is the marketplace's side of lease control in the test: it
// checks each webhook's signature, fails the first delivery of every stop
// (so the retry is exercised) and applies each event id once.
type scheduler struct {
	mu         sync.Mutex
	deliveries map[string]int // event id → deliveries received
	applied    []string       // kinds, in the order first applied
	bad        []string       // deliveries whose signature did not verify
}

func (s *scheduler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ts, id := r.Header.Get("Gpubill-Timestamp"), r.Header.Get("Gpubill-Event-Id")
	m := hmac.New(sha256.New, []byte(leaseSecret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	want := "v1=" + hex.EncodeToString(m.Sum(nil))
	var ev struct {
		EventID string `json:"event_id"`
		Kind    string `json:"kind"`
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hmac.Equal([]byte(want), []byte(r.Header.Get("Gpubill-Signature"))) || json.Unmarshal(body, &ev) != nil || ev.EventID != id {
		s.bad = append(s.bad, string(body))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	s.deliveries[id]++
	if ev.Kind == "stop_requested" && s.deliveries[id] == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if s.deliveries[id] == 1 || (ev.Kind == "stop_requested" && s.deliveries[id] == 2) {
		s.applied = append(s.applied, ev.Kind)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *scheduler) state() ([]string, map[string]int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := map[string]int{}
	for k, v := range s.deliveries {
		d[k] = v
	}
	return slices.Clone(s.applied), d, slices.Clone(s.bad)
}

// TestRenterWalletChargesAndLeaseControl is the renter's view and lease
// control through the REST API: the wallet's balance, credit limit, burn
// rate and runway; charges with the lines that explain them; a low-runway
// warning, a stop when the wallet reaches minus its credit limit (charges
// still post and the renter is flagged), and a resume after a top-up, each
// published on lease.* and sent once per crossing as a signed webhook,
// retried when the receiver fails.
func TestRenterWalletChargesAndLeaseControl(t *testing.T) {
	sch := &scheduler{deliveries: map[string]int{}}
	hook := httptest.NewServer(sch)
	defer hook.Close()
	f := newFixtureWith(t, func(c *stack.Config) {
		c.LeaseControl = &ledger.LeaseControlConfig{URL: hook.URL, Secret: leaseSecret, RunwayWarn: 2 * time.Hour}
	})
	renter := testkit.Token(t, []byte(secret), auth.RoleRenter, "r-001", time.Hour)

	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.6", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "5.00"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-002", "name": "Other", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices":    []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}},
		"pue_surcharge": map[string]string{"threshold": "1.5", "per_gpu_hour": "0.10"}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "10.00", "currency": "CNY", "external_ref": "bank-1"})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-002", "amount": "10.00", "currency": "CNY", "external_ref": "bank-2"})

	wallet := func() map[string]any {
		t.Helper()
		code, out := f.do(http.MethodGet, "/v1/renters/r-001/wallet", renter, nil)
		if code != http.StatusOK {
			t.Fatalf("own wallet: HTTP %d %v", code, out)
		}
		bs, _ := out["balances"].([]any)
		if len(bs) != 1 {
			t.Fatalf("wallet balances: %v", out)
		}
		return bs[0].(map[string]any)
	}
	// The credit limit reaches the ledger as party.updated.r-001.
	testkit.Eventually(t, 20*time.Second, func() bool { return wallet()["credit_limit"] == "5.00" }, "credit limit 5.00 in the wallet")
	if w := wallet(); w["balance"] != "10.00" || w["available"] != "15.00" || w["burn_rate_per_hour"] != "0.00" || w["runway_hours"] != "" ||
		w["lease_control"] != "ok" {
		t.Fatalf("wallet before usage: %v", w)
	}
	// Renters read only their own; no token is a 401.
	if code, out := f.do(http.MethodGet, "/v1/renters/r-002/wallet", renter, nil); code != http.StatusForbidden {
		t.Fatalf("another renter's wallet: HTTP %d %v", code, out)
	}
	if code, out := f.do(http.MethodGet, "/v1/renters/r-002/charges", renter, nil); code != http.StatusForbidden {
		t.Fatalf("another renter's charges: HTTP %d %v", code, out)
	}
	if code, _ := f.do(http.MethodGet, "/v1/renters/r-001/wallet", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("wallet without a token: HTTP %d", code)
	}
	// An id outside the grammar is a 400 naming the field (it was a 404,
	// "no wallet yet").
	if code, out := f.do(http.MethodGet, "/v1/renters/"+strings.Repeat("r", 65)+"/wallet", f.finance, nil); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out), "renter_id") {
		t.Fatalf("wallet of a 65-character id: HTTP %d %v, want 400 naming renter_id", code, out)
	}

	usage := func(lease string, daysBack int) {
		t.Helper()
		start, end := dayUsage(time.Now(), daysBack) // 1.5 h of day time
		res := f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": "evt-" + lease,
			"lease_id": lease, "provider_id": "p-001", "renter_id": "r-001", "gpu_model": "RTX_4090", "gpu_count": 2,
			"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
		if fmt.Sprint(res["accepted"]) != "1" {
			t.Fatalf("usage %s: %v", lease, res)
		}
	}
	// 2 GPUs × 1.5 h × 2.80 = 8.40, PUE 1.6 ≥ 1.5: 3 GPU-hours × 0.10 = 0.30.
	usage("lease-1", 2)
	f.waitBalance("renter:r-001:wallet", "CNY", "1.30")
	// available 6.30 at 8.70 an hour: 0.72 h, under the 2 h warning.
	testkit.Eventually(t, 20*time.Second, func() bool { return wallet()["lease_control"] == "warned" }, "renter warned")
	if w := wallet(); w["balance"] != "1.30" || w["available"] != "6.30" || w["burn_rate_per_hour"] != "8.70" || w["runway_hours"] != "0.72" ||
		w["over_credit_limit"] == true {
		t.Fatalf("wallet after one charge: %v", w)
	}

	// The charge with the lines that explain it.
	code, out := f.do(http.MethodGet, "/v1/renters/r-001/charges", renter, nil)
	cs, _ := out["charges"].([]any)
	if code != http.StatusOK || len(cs) != 1 {
		t.Fatalf("charges: HTTP %d %v", code, out)
	}
	c := cs[0].(map[string]any)
	if c["lease_id"] != "lease-1" || c["amount"] != "8.70" || c["currency"] != "CNY" || c["provider_id"] != "p-001" {
		t.Fatalf("charge: %v", c)
	}
	kinds := map[string]map[string]any{}
	for _, l := range c["lines"].([]any) {
		kinds[l.(map[string]any)["kind"].(string)] = l.(map[string]any)
	}
	if u := kinds["usage"]; u == nil || u["gpu_model"] != "RTX_4090" || u["gpu_hours"] != "3" || u["unit_price"] != "2.8" || u["amount"] != "8.4" {
		t.Errorf("usage line: %v", kinds["usage"])
	}
	if s := kinds["pue_surcharge"]; s == nil || s["amount"] != "0.3" {
		t.Errorf("surcharge line: %v", kinds["pue_surcharge"])
	}

	// The second charge takes the wallet past minus its limit: it posts
	// anyway, the renter is flagged and its GPUs asked to stop.
	usage("lease-2", 3)
	f.waitBalance("renter:r-001:wallet", "CNY", "-7.40")
	testkit.Eventually(t, 20*time.Second, func() bool { return wallet()["lease_control"] == "stopped" }, "renter stopped")
	if w := wallet(); w["available"] != "-2.40" || w["over_credit_limit"] != true || w["over_credit_limit_since"] == nil || w["runway_hours"] != "0.00" {
		t.Fatalf("wallet past its limit: %v", w)
	}
	// Pages: one charge per page, newest first, then the end.
	_, p1 := f.do(http.MethodGet, "/v1/renters/r-001/charges?page_size=1", renter, nil)
	tok, _ := p1["next_page_token"].(string)
	_, p2 := f.do(http.MethodGet, "/v1/renters/r-001/charges?page_size=1&page_token="+tok, renter, nil)
	first, second := p1["charges"].([]any), p2["charges"].([]any)
	if tok == "" || len(first) != 1 || len(second) != 1 || first[0].(map[string]any)["lease_id"] != "lease-1" ||
		second[0].(map[string]any)["lease_id"] != "lease-2" || p2["next_page_token"] != "" {
		t.Fatalf("pages: %v / %v", p1, p2)
	}

	// The renter reads its wallet's journal too: deposit and both charges.
	code, out = f.do(http.MethodGet, "/v1/transactions?account=renter:r-001:wallet", renter, nil)
	if txs, _ := out["transactions"].([]any); code != http.StatusOK || len(txs) != 3 {
		t.Fatalf("own journal: HTTP %d %v", code, out)
	}

	// A top-up lifts the stop.
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "50.00", "currency": "CNY", "external_ref": "bank-3"})
	testkit.Eventually(t, 20*time.Second, func() bool { return wallet()["lease_control"] == "ok" }, "renter resumed")

	// The scheduler applied warn, stop, resume once each; the stop arrived
	// on its second delivery, under one event id.
	testkit.Eventually(t, 20*time.Second, func() bool {
		applied, _, _ := sch.state()
		return len(applied) == 3
	}, "three webhooks applied")
	applied, deliveries, bad := sch.state()
	if strings.Join(applied, ",") != "runway_low,stop_requested,resume_allowed" || len(bad) > 0 {
		t.Fatalf("applied %v (bad signatures %v)", applied, bad)
	}
	var stops int // the id ends with the restore epoch (-r…)
	for id, n := range deliveries {
		if strings.HasPrefix(id, "lease-r-001-CNY-1-stop_requested-r") {
			stops += n
		}
	}
	if stops != 2 || len(deliveries) != 3 {
		t.Fatalf("deliveries %v, want the stop twice (first refused), each event once more", deliveries)
	}
	if v := metricValue(t, f.base+"/metrics", `gpubill_lease_control_webhooks_total{outcome="retry"}`); v < 1 {
		t.Errorf("retry counter %v, want ≥ 1", v)
	}

	// The same three events are on the LEASE stream for in-cluster consumers.
	nc, err := nats.Connect(f.st.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), "LEASE")
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"lease.runway.low.r-001", "lease.stop.requested.r-001", "lease.resume.allowed.r-001"} {
		if _, err := st.GetLastMsgForSubject(context.Background(), subj); err != nil {
			t.Errorf("%s: %v", subj, err)
		}
	}
}

// metricValue reads one series from a Prometheus text scrape (-1 if absent).
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return -1
}
