package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
)

// A quote splits as settlement does, from the same sources: with the stack
// configured at a 22 % standard commission (GPUBILL_COMMISSION_RATES), the
// quote for some usage and the statement settlement makes for that usage
// agree on gross, rate, commission, tax and net, and the quote names the
// commission configuration's version and the tax rule it used. Selecting
// another rule set for the jurisdiction at the tax service changes the
// next quote's tax and the rule it names.
func TestQuoteSplitsAsSettlement(t *testing.T) {
	const rates, bounds = "standard=0.22,pro=0.18,partner=0.15", "0.15-0.25"
	f := newFixtureWith(t, func(c *stack.Config) { c.CommissionRates, c.CommissionBounds = rates, bounds })
	policy, err := split.ParseCommission(rates, bounds)
	if err != nil {
		t.Fatal(err)
	}
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-q", "name": "Rig", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-q", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-q", "amount": "100.00", "currency": "CNY", "external_ref": "bank-q"})
	start, end := dayUsage(time.Now(), 1)
	cycle := cycles.Default().ForUsageEnd(end).ID
	quoteBody := map[string]any{"gpu_model": "RTX_4090", "gpu_count": 2, "hours": "1.5", "start_time": start.Format(time.RFC3339),
		"currency": "CNY", "provider_tier": "standard", "tax_profile": "individual", "jurisdiction": "CN"}
	q := f.mustDo(http.MethodPost, "/v1/quotes", quoteBody)
	for k, want := range map[string]string{"renter_price": "8.40", "commission_rate": "0.22", "commission_config_version": policy.Version(),
		"tax_rule_set": split.RuleSetFlat20, "tax_rule_version": "1"} {
		if q[k] != want {
			t.Errorf("quote %s = %v, want %s", k, q[k], want)
		}
	}
	if policy.Version() == split.DefaultCommission().Version() {
		t.Fatal("the configured policy has the default's version")
	}

	f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": "evt-q", "lease_id": "lease-q",
		"provider_id": "p-q", "renter_id": "r-q", "gpu_model": "RTX_4090", "gpu_count": 2,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
	f.waitBalance("provider:p-q:pending:"+cycle, "CNY", "8.40")
	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})
	var stmt map[string]any
	testkit.Eventually(t, 60*time.Second, func() bool {
		_, st := f.do(http.MethodGet, "/v1/providers/p-q/statements?cycle_id="+cycle, f.finance, nil)
		ss, _ := st["statements"].([]any)
		if len(ss) == 1 {
			stmt = ss[0].(map[string]any)
		}
		return stmt != nil
	}, "statement of p-q in %s", cycle)
	for qk, sk := range map[string]string{"renter_price": "gross", "commission_rate": "commission_rate", "commission": "commission",
		"tax_withheld": "tax_withheld", "provider_net": "net"} {
		if q[qk] != stmt[sk] {
			t.Errorf("quote %s = %v, statement %s = %v", qk, q[qk], sk, stmt[sk])
		}
	}

	// China labour remuneration for CN from now on: the quote follows.
	f.mustDo(http.MethodPost, "/v1/tax-rule-selections", map[string]any{"jurisdiction": "CN", "rule_set": split.RuleSetCNLabour})
	q2 := f.mustDo(http.MethodPost, "/v1/quotes", quoteBody)
	// 8.40 - 1.85 = 6.55 is at most 4 000: less the 800 deduction nothing is taxable.
	if q2["tax_rule_set"] != split.RuleSetCNLabour || q2["tax_withheld"] != "0.00" || q2["provider_net"] != "6.55" || q2["commission"] != q["commission"] {
		t.Fatalf("quote after selecting cn_labour: %v", q2)
	}
	bad := map[string]any{}
	for k, v := range quoteBody {
		bad[k] = v
	}
	bad["jurisdiction"] = "not a jurisdiction!"
	if code, out := f.do(http.MethodPost, "/v1/quotes", f.finance, bad); code != http.StatusBadRequest {
		t.Fatalf("bad jurisdiction: HTTP %d %v", code, out)
	}
}

// A quote naming its provider, through REST, splits as that provider's
// settlement does: by the tax profile and jurisdiction on record, not
// individual in CN. With cn_labour selected for CN, an enterprise in CN
// and an individual in HK (CN's selection does not reach it: flat20) were
// both quoted as a CN individual, 20.00 of tax, where their statements
// withheld 0.00 and 180.00. Worked by hand: 8 × RTX_4090 for 1.5 h at
// 100.00 is 1200.00; standard 25 % is 300.00, base 900.00; flat20 on an
// individual 180.00; enterprises 0.00 (cn_labour on a CN individual:
// (900 − 800) × 20 % = 20.00). Quoting another profile than the record is
// a 400 naming the field.
func TestQuoteOfAProviderSplitsByItsProfile(t *testing.T) {
	f := newFixture(t)
	providers := []struct {
		give, profile, jurisdiction string
		wantTax, wantNet            string
	}{
		{"p-ent", "enterprise", "CN", "0.00", "900.00"},
		{"p-hk", "individual", "HK", "180.00", "720.00"},
	}
	for _, p := range providers {
		f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": p.give, "name": "Rig", "tier": "standard",
			"tax_profile": p.profile, "jurisdiction": p.jurisdiction, "currency": "CNY"})
	}
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-q", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "100.00"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-q", "amount": "3000.00", "currency": "CNY", "external_ref": "bank-q"})
	f.mustDo(http.MethodPost, "/v1/tax-rule-selections", map[string]any{"jurisdiction": "CN", "rule_set": split.RuleSetCNLabour})
	start, end := dayUsage(time.Now(), 1)
	cycle := cycles.Default().ForUsageEnd(end).ID
	for _, p := range providers {
		f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": "evt-" + p.give,
			"lease_id": "lease-" + p.give, "provider_id": p.give, "renter_id": "r-q", "gpu_model": "RTX_4090", "gpu_count": 8,
			"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
		f.waitBalance("provider:"+p.give+":pending:"+cycle, "CNY", "1200.00")
	}
	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})
	quoteBody := func(provider string) map[string]any {
		return map[string]any{"gpu_model": "RTX_4090", "gpu_count": 8, "hours": "1.5", "start_time": start.Format(time.RFC3339),
			"currency": "CNY", "provider_tier": "standard", "provider_id": provider}
	}
	for _, p := range providers {
		var stmt map[string]any
		testkit.Eventually(t, 60*time.Second, func() bool {
			_, st := f.do(http.MethodGet, "/v1/providers/"+p.give+"/statements?cycle_id="+cycle, f.finance, nil)
			ss, _ := st["statements"].([]any)
			if len(ss) == 1 {
				stmt = ss[0].(map[string]any)
			}
			return stmt != nil
		}, "statement of %s in %s", p.give, cycle)
		if stmt["gross"] != "1200.00" || stmt["commission"] != "300.00" || stmt["tax_withheld"] != p.wantTax || stmt["net"] != p.wantNet {
			t.Errorf("%s's statement: %v; want 1200.00 = 300.00 + %s + %s", p.give, stmt, p.wantTax, p.wantNet)
		}
		own := testkit.Token(t, []byte(secret), auth.RoleProvider, p.give, time.Hour)
		code, q := f.do(http.MethodPost, "/v1/quotes", own, quoteBody(p.give))
		if code != http.StatusOK {
			t.Fatalf("%s's quote: HTTP %d %v", p.give, code, q)
		}
		for qk, sk := range map[string]string{"renter_price": "gross", "commission": "commission", "tax_withheld": "tax_withheld",
			"provider_net": "net"} {
			if q[qk] != stmt[sk] {
				t.Errorf("%s (%s in %s): quote %s = %v, statement %s = %v", p.give, p.profile, p.jurisdiction, qk, q[qk], sk, stmt[sk])
			}
		}
	}
	bad := quoteBody("p-ent")
	bad["tax_profile"] = "individual"
	if code, out := f.do(http.MethodPost, "/v1/quotes", f.finance, bad); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out), "tax_profile") {
		t.Errorf("p-ent quoted as an individual: HTTP %d %v; want 400 naming tax_profile", code, out)
	}
}

// A quote naming its provider, through REST, takes the commission of the
// provider's tier on record, as its settlement does: it took the request's
// provider_tier, else standard, and quoted a partner 25 % where its
// statement took 15 %. Worked by hand: 8 × RTX_4090 for 1.5 h at 100.00
// is 1200.00; partner 15 % is 180.00 (standard's 300.00), base 1020.00;
// flat20 on an individual in CN 204.00; net 816.00. Quoting another tier
// than the record is a 400 naming provider_tier; the recorded one is
// quoted as if omitted.
func TestQuoteOfAProviderTakesItsTier(t *testing.T) {
	f := newFixture(t)
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-part", "name": "Rig", "tier": "partner",
		"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-q", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "100.00"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-q", "amount": "3000.00", "currency": "CNY", "external_ref": "bank-q"})
	start, end := dayUsage(time.Now(), 1)
	cycle := cycles.Default().ForUsageEnd(end).ID
	f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": "evt-part",
		"lease_id": "lease-part", "provider_id": "p-part", "renter_id": "r-q", "gpu_model": "RTX_4090", "gpu_count": 8,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
	f.waitBalance("provider:p-part:pending:"+cycle, "CNY", "1200.00")
	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})
	var stmt map[string]any
	testkit.Eventually(t, 60*time.Second, func() bool {
		_, st := f.do(http.MethodGet, "/v1/providers/p-part/statements?cycle_id="+cycle, f.finance, nil)
		ss, _ := st["statements"].([]any)
		if len(ss) == 1 {
			stmt = ss[0].(map[string]any)
		}
		return stmt != nil
	}, "statement of p-part in %s", cycle)
	want := map[string]string{"gross": "1200.00", "commission_rate": "0.15", "commission": "180.00", "tax_withheld": "204.00", "net": "816.00"}
	for k, v := range want {
		if stmt[k] != v {
			t.Errorf("p-part's statement %s = %v, want %s", k, stmt[k], v)
		}
	}
	quote := func(tier string) (int, map[string]any) {
		body := map[string]any{"gpu_model": "RTX_4090", "gpu_count": 8, "hours": "1.5", "start_time": start.Format(time.RFC3339),
			"currency": "CNY", "provider_id": "p-part"}
		if tier != "" {
			body["provider_tier"] = tier
		}
		return f.do(http.MethodPost, "/v1/quotes", testkit.Token(t, []byte(secret), auth.RoleProvider, "p-part", time.Hour), body)
	}
	// Pricing keeps its own read model of the tiers, as settlement does:
	// the record has reached it once a quote as standard is refused.
	var code int
	var out map[string]any
	testkit.Eventually(t, 10*time.Second, func() bool {
		code, out = quote("standard")
		return code == http.StatusBadRequest
	}, "p-part quoted as standard: %v; want 400 naming provider_tier", lastAnswer(func() string { return fmt.Sprintf("HTTP %d %v", code, out) }))
	if !strings.Contains(fmt.Sprint(out), "provider_tier") {
		t.Errorf("p-part quoted as standard: %v; want it to name provider_tier", out)
	}
	for _, tier := range []string{"", "partner"} {
		code, q := quote(tier)
		if code != http.StatusOK {
			t.Fatalf("p-part's quote with provider_tier %q: HTTP %d %v", tier, code, q)
		}
		for qk, sk := range map[string]string{"renter_price": "gross", "commission_rate": "commission_rate", "commission": "commission",
			"tax_withheld": "tax_withheld", "provider_net": "net"} {
			if q[qk] != stmt[sk] {
				t.Errorf("p-part (partner) quoted with provider_tier %q: %s = %v, statement %s = %v", tier, qk, q[qk], sk, stmt[sk])
			}
		}
		// The answer names what it split for: a partner's quote is told
		// from a standard one by more than its rate.
		for k, v := range map[string]string{"provider_tier": "partner", "provider_tier_source": "record", "tax_profile": "individual",
			"jurisdiction": "CN", "tax_profile_source": "record"} {
			if q[k] != v {
				t.Errorf("p-part's quote with provider_tier %q: %s = %v, want %s", tier, k, q[k], v)
			}
		}
	}
	// A provider pricing has not heard of is split at standard, as its
	// settlement snapshots it; asked as a partner, it is a 400 saying so.
	unknown := func(tier string) (int, map[string]any) {
		body := map[string]any{"gpu_model": "RTX_4090", "gpu_count": 8, "hours": "1.5", "start_time": start.Format(time.RFC3339),
			"currency": "CNY", "provider_id": "p-unheard", "provider_tier": tier}
		return f.do(http.MethodPost, "/v1/quotes", testkit.Token(t, []byte(secret), auth.RoleProvider, "p-unheard", time.Hour), body)
	}
	if code, q := unknown("partner"); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(q), "standard") {
		t.Errorf("p-unheard quoted as partner: HTTP %d %v; want 400 naming standard", code, q)
	}
	if code, q := unknown(""); code != http.StatusOK || q["provider_tier"] != "standard" || q["provider_tier_source"] != "default" ||
		q["commission_rate"] != "0.25" {
		t.Errorf("p-unheard quoted: HTTP %d %v; want standard (default) at 0.25", code, q)
	}
}

// lastAnswer formats, when printed, what its func reads then: the last
// answer polled, in a message testkit.Eventually prints on timeout.
type lastAnswer func() string

func (f lastAnswer) String() string { return f() }
