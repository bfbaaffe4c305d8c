package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A renter's October through the whole stack: usage rated by a card with a
// night band, volume tiers and a PUE surcharge, a deposit; the month's
// invoice issued as the schedule issues it (the internal route, with the
// service identity), once; the renter reads it as JSON and as PDF, whose
// text carries the ledger's own figures: charges = what left the wallet,
// closing balance = the wallet as of the month's end.
func TestRenterInvoiceThroughREST(t *testing.T) {
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Date(2026, 10, 20, 12, 0, 0, 0, sh))
	f := newFixtureAt(t, clk)
	const renter, provider = "r-inv", "p-inv"
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": provider, "name": "Rig", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.6", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": renter, "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-inv-other", "name": "Other", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices":    []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.00"}},
		"time_bands":    []map[string]string{{"name": "night", "start": "23:00", "end": "07:00", "timezone": "Asia/Shanghai", "multiplier": "0.80"}},
		"volume_tiers":  []map[string]string{{"up_to_gpu_hours": "5", "discount": "0"}, {"up_to_gpu_hours": "", "discount": "0.10"}},
		"pue_surcharge": map[string]string{"threshold": "1.5", "per_gpu_hour": "0.05"},
		"rate_card_id":  "rc-inv",
	})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": renter, "amount": "100.00", "currency": "CNY", "external_ref": "bank-inv-1"})
	// 6 GPU-hours by day (5 in the first tier, 1 in the second), 2 by night
	// (second tier).
	events := []any{
		map[string]any{"id": "evt-inv-1", "lease_id": "lease-inv-1", "provider_id": provider, "renter_id": renter, "gpu_model": "RTX_4090",
			"gpu_count": 2, "start_time": time.Date(2026, 10, 18, 10, 0, 0, 0, sh).Format(time.RFC3339),
			"end_time": time.Date(2026, 10, 18, 13, 0, 0, 0, sh).Format(time.RFC3339), "region": "cn-east", "workload": "training"},
		map[string]any{"id": "evt-inv-2", "lease_id": "lease-inv-2", "provider_id": provider, "renter_id": renter, "gpu_model": "RTX_4090",
			"gpu_count": 1, "start_time": time.Date(2026, 10, 19, 23, 30, 0, 0, sh).Format(time.RFC3339),
			"end_time": time.Date(2026, 10, 20, 1, 30, 0, 0, sh).Format(time.RFC3339), "region": "cn-east", "workload": "inference"},
	}
	if res := f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": events}); fmt.Sprint(res["accepted"]) != "2" {
		t.Fatalf("ingest: %v", res)
	}
	// Day: 5 × 2.00 + 1 × 2.00 × 0.90 = 11.80; night: 2 × 2.00 × 0.80 × 0.90
	// = 2.88; PUE: 8 × 0.05 = 0.40. 100 - 15.08.
	f.waitBalance("renter:"+renter+":wallet", "CNY", "84.92")

	service, err := auth.Issue([]byte(secret), auth.RoleService, "settlement", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 11, 1, 1, 0, 0, 0, sh)) // the schedule's hour
	for i, want := range []string{"1", "0"} {       // a re-run issues nothing new
		code, out := f.do(http.MethodPost, "/v1/internal/invoices:issue", service, map[string]any{"period": "2026-10"})
		if code != http.StatusOK || fmt.Sprint(out["issued"]) != want {
			t.Fatalf("issue run %d: HTTP %d %v, want issued %s", i+1, code, out, want)
		}
	}

	renterTok, err := auth.Issue([]byte(secret), auth.RoleRenter, renter, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, out := f.do(http.MethodGet, "/v1/renters/"+renter+"/invoices", renterTok, nil)
	invs, _ := out["invoices"].([]any)
	if code != http.StatusOK || len(invs) != 1 {
		t.Fatalf("list: HTTP %d %v", code, out)
	}
	// The currency filter reads a code in any case, and refuses an unknown
	// one (?currency=cny listed nothing, as did ?currency=XYZ).
	for q, want := range map[string]int{"cny": http.StatusOK, "CNY": http.StatusOK, "XYZ": http.StatusBadRequest} {
		code, out := f.do(http.MethodGet, "/v1/renters/"+renter+"/invoices?currency="+q, renterTok, nil)
		if got, _ := out["invoices"].([]any); code != want || (code == http.StatusOK && len(got) != 1) {
			t.Fatalf("list ?currency=%s: HTTP %d %v, want %d", q, code, out, want)
		}
	}
	inv := invs[0].(map[string]any)
	id, number := inv["invoice_id"].(string), inv["number"].(string)
	if number != "2026-000001" || inv["period"] != "2026-10" {
		t.Fatalf("invoice %v", inv)
	}
	// The ledger's figures, read on their own.
	end, err := time.Parse(time.RFC3339, inv["period_end"].(string))
	if err != nil {
		t.Fatal(err)
	}
	code, acc := f.do(http.MethodGet, "/v1/accounts/renter:"+renter+":wallet?as_of="+url.QueryEscape(end.Add(-time.Second).Format(time.RFC3339)), f.finance, nil)
	if code != http.StatusOK {
		t.Fatalf("wallet as of %s: HTTP %d %v", end, code, acc)
	}
	ledgerClosing := decimal.RequireFromString(acc["balances"].([]any)[0].(map[string]any)["amount"].(string))
	ledgerCharges := decimal.RequireFromString("100.00").Sub(ledgerClosing) // the only other movement is the deposit

	// The lines explain the charges, computed from the card by hand: day,
	// first tier 5 × 2.00; day, second tier 1 × 2.00 × 0.90 (0.20 off);
	// night, second tier 2 × 2.00 × 0.80 × 0.90 (0.32 off); PUE 8 × 0.05.
	// They add up to the charges.
	sum := decimal.Zero
	var got []string
	for _, l := range inv["lines"].([]any) {
		m := l.(map[string]any)
		sum = sum.Add(decimal.RequireFromString(m["amount"].(string)))
		got = append(got, fmt.Sprintf("%s|%s|%s|%s|%s|%s", m["kind"], m["band"], m["tier"], m["gpu_hours"], m["amount"], m["tier_discount"]))
	}
	sort.Strings(got)
	want := []string{"pue_surcharge|||8|0.40|0.00", "usage||0-5 GPU-h|5|10.00|0.00", "usage||5+ GPU-h|1|1.80|0.20", "usage|night|5+ GPU-h|2|2.88|0.32"}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lines\n%v\nwant\n%v", got, want)
	}
	if !sum.Equal(ledgerCharges) || inv["charges"] != ledgerCharges.StringFixed(2) || inv["closing_balance"] != ledgerClosing.StringFixed(2) {
		t.Fatalf("invoice charges %v (lines %s), closing %v; the ledger: charges %s, closing %s",
			inv["charges"], sum, inv["closing_balance"], ledgerCharges, ledgerClosing)
	}
	if inv["tier_discounts"] != "0.52" || inv["surcharges"] != "0.40" {
		t.Fatalf("tier discounts %v, surcharges %v", inv["tier_discounts"], inv["surcharges"])
	}

	code, pdf := f.do(http.MethodGet, "/v1/invoices/"+id+"?format=pdf", renterTok, nil)
	if code != http.StatusOK {
		t.Fatalf("pdf: HTTP %d", code)
	}
	cells := testkit.PDFCells(t, []byte(pdf["_text"].(string)))
	for label, want := range map[string]string{"Invoice number": number, "Charges": ledgerCharges.StringFixed(2) + " CNY",
		"Closing balance": ledgerClosing.StringFixed(2) + " CNY", "Deposits": "100.00 CNY", "Total charges": ledgerCharges.StringFixed(2)} {
		if got := testkit.CellAfter(cells, label); got != want {
			t.Errorf("pdf: %q is followed by %q, want %q (the ledger's)", label, got, want)
		}
	}

	otherTok, err := auth.Issue([]byte(secret), auth.RoleRenter, "r-inv-other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := f.do(http.MethodGet, "/v1/invoices/"+id, otherTok, nil); code != http.StatusNotFound {
		t.Fatalf("another renter's invoice: HTTP %d, want 404 (as an id no invoice holds)", code)
	}
}
