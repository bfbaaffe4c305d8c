package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
	"github.com/gpubill/gpubill/services/ledger"
)

// TestRenterCloseThroughREST: finance changes a renter after creation
// through PATCH /v1/renters/{renter_id}. Renter r-1 (credit limit 500)
// left with 200 in its wallet and finance refunded it by a manual entry:
// at 0 its lease control still saw 500 to spend and asked no stop, and
// nothing could set its limit to 0 (no route; creating it again with a
// new limit was a 409). Lowering the limit stops it; closing r-2, with
// money left, stops it whatever its balance, and its usage that starts
// after the close is refused while usage that started before still posts.
func TestRenterCloseThroughREST(t *testing.T) {
	sch := &scheduler{deliveries: map[string]int{}}
	hook := httptest.NewServer(sch)
	defer hook.Close()
	f := newFixtureWith(t, func(c *stack.Config) {
		c.LeaseControl = &ledger.LeaseControlConfig{URL: hook.URL, Secret: leaseSecret, RunwayWarn: 2 * time.Hour}
	})
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}})
	for _, r := range []string{"r-1", "r-2"} {
		f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": r, "name": "Lab", "currency": "CNY", "credit_limit": "500"})
		f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": r, "amount": "200.00", "currency": "CNY", "external_ref": "bank-" + r})
	}
	f.mustDo(http.MethodPost, "/v1/transactions", map[string]any{"idempotency_key": "refund-r-1", "description": "r-1 left: refund",
		"postings": []map[string]string{
			{"account": "renter:r-1:wallet", "direction": "debit", "amount": "200.00", "currency": "CNY"},
			{"account": "bank:client", "direction": "credit", "amount": "200.00", "currency": "CNY"}}})
	f.waitBalance("renter:r-1:wallet", "CNY", "0")
	wallet := func(r string) map[string]any {
		t.Helper()
		code, out := f.do(http.MethodGet, "/v1/renters/"+r+"/wallet", f.finance, nil)
		bs, _ := out["balances"].([]any)
		if code != http.StatusOK || len(bs) != 1 {
			t.Fatalf("wallet of %s: HTTP %d %v", r, code, out)
		}
		return bs[0].(map[string]any)
	}
	// A credit limit that reached the ledger while the refund's wallet was
	// evaluated left r-1 stopped until the sweep, a minute later (ledger
	// TestLeaseControlSeesACreditLimitArrivingMidEvaluation).
	testkit.Eventually(t, 20*time.Second, func() bool {
		w := wallet("r-1")
		return w["credit_limit"] == "500.00" && w["available"] == "500.00" && w["lease_control"] == "ok"
	}, "r-1 refunded to 0, 500 of credit, ok")

	// Bad input, an unknown renter, a renter's own token.
	renter := testkit.Token(t, []byte(secret), auth.RoleRenter, "r-1", time.Hour)
	for _, c := range []struct {
		path, token string
		body        map[string]any
		want        int
		field       string
	}{
		{"/v1/renters/r-1", f.finance, map[string]any{"credit_limit": "-1"}, http.StatusBadRequest, "credit_limit"},
		{"/v1/renters/r-1", f.finance, map[string]any{"credit_limit": "ten"}, http.StatusBadRequest, "credit_limit"},
		{"/v1/renters/r-1", f.finance, map[string]any{"status": "paused"}, http.StatusBadRequest, "status"},
		{"/v1/renters/r-1", f.finance, map[string]any{"currency": "USD"}, http.StatusBadRequest, "currency"},
		{"/v1/renters/r-nobody", f.finance, map[string]any{"credit_limit": "0"}, http.StatusNotFound, ""},
		{"/v1/renters/r-1", renter, map[string]any{"credit_limit": "100000"}, http.StatusForbidden, ""},
	} {
		code, out := f.do(http.MethodPatch, c.path, c.token, c.body)
		if code != c.want || !strings.Contains(fmt.Sprint(out), c.field) {
			t.Errorf("PATCH %s %v: HTTP %d %v, want %d naming %q", c.path, c.body, code, out, c.want, c.field)
		}
	}

	out := f.mustDo(http.MethodPatch, "/v1/renters/r-1", map[string]any{"credit_limit": "0"})
	if out["credit_limit"] != "0" || fmt.Sprint(out["version"]) != "2" || out["status"] != "active" {
		t.Fatalf("r-1's limit lowered: %v", out)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return wallet("r-1")["lease_control"] == "stopped" },
		"r-1 stopped: its limit lowered to 0 with 0 in its wallet")

	before := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
	closed := f.mustDo(http.MethodPatch, "/v1/renters/r-2", map[string]any{"status": "closed"})
	closedAt, err := time.Parse(time.RFC3339Nano, fmt.Sprint(closed["closed_at"]))
	if err != nil || closed["status"] != "closed" || fmt.Sprint(closed["version"]) != "2" {
		t.Fatalf("r-2 closed: %v (%v)", closed, err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return wallet("r-2")["lease_control"] == "stopped" },
		"closed r-2 stopped with 700 to spend")
	if code, out := f.do(http.MethodPatch, "/v1/renters/r-2", f.finance, map[string]any{"status": "active"}); code != http.StatusBadRequest {
		t.Fatalf("reopen r-2: HTTP %d %v, want 400 (closed is final)", code, out)
	}
	after := closedAt.Add(time.Second)
	ev := func(id string, start time.Time) map[string]any {
		return map[string]any{"id": id, "lease_id": "lease-" + id, "provider_id": "p-001", "renter_id": "r-2", "gpu_model": "RTX_4090",
			"gpu_count": 1, "start_time": start.Format(time.RFC3339Nano), "end_time": start.Add(time.Minute).Format(time.RFC3339Nano)}
	}
	res := f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{ev("evt-before", before), ev("evt-after", after)}})
	rej, _ := res["rejected"].([]any)
	if fmt.Sprint(res["accepted"]) != "1" || len(rej) != 1 || !strings.Contains(fmt.Sprint(rej[0]), `renter \"r-2\" closed at`) &&
		!strings.Contains(fmt.Sprint(rej[0]), `renter "r-2" closed at`) {
		t.Fatalf("usage of closed r-2: %v; want evt-before accepted, evt-after refused as closed", res)
	}
	f.waitBalance("renter:r-2:wallet", "CNY", "199.95") // 1 GPU-minute at 2.80 an hour: 0.0466… → 0.05
	if w := wallet("r-2"); w["lease_control"] != "stopped" {
		t.Fatalf("closed r-2 after its late usage posted: %v", w)
	}
}
