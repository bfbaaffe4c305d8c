package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestGPUCatalogueOneSource: one catalogue (metering's, GET/POST
// /v1/gpu-models) decides for both sides, so a card cannot price a model
// whose usage is refused as unknown: a card naming
// a model it lacks is a 400 naming the model, and usage of a model the card
// prices is accepted and charged, also when it names the model by an alias.
func TestGPUCatalogueOneSource(t *testing.T) {
	f := newFixture(t)
	renter := testkit.Token(t, []byte(secret), auth.RoleRenter, "r-001", time.Hour)
	admin := testkit.Token(t, []byte(secret), auth.RoleAdmin, "", time.Hour)

	// Seeded: the models most rented in China among them, with aliases; any
	// role reads the catalogue.
	code, out := f.do(http.MethodGet, "/v1/gpu-models", renter, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/gpu-models as renter: HTTP %d %v", code, out)
	}
	byID := map[string]map[string]any{}
	for _, m := range out["models"].([]any) {
		mm := m.(map[string]any)
		byID[mm["gpu_model"].(string)] = mm
	}
	for _, id := range []string{"T4", "H20", "H800", "A800", "L20", "RTX_4090D", "H100", "A100", "L40S", "RTX_4090"} {
		if byID[id] == nil {
			t.Errorf("seed lacks %s", id)
		}
	}
	if d := byID["RTX_4090D"]; d == nil || !slices.Contains(toStrings(d["aliases"]), "RTX4090D") || d["vendor"] != "nvidia" || fmt.Sprint(d["memory_gb"]) != "24" {
		t.Errorf("RTX_4090D: %v", d)
	}

	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})

	// A card pricing a model the catalogue lacks: 400 naming it.
	code, out = f.do(http.MethodPost, "/v1/rate-cards", f.finance, map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "T4", "hourly": "1.00"}, {"gpu_model": "Z_9000", "hourly": "9.00"}}})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out), `unknown gpu_model "Z_9000"`) || !strings.Contains(fmt.Sprint(out), "gpu_prices[1].gpu_model") {
		t.Fatalf("card pricing Z_9000: HTTP %d %v, want 400 naming gpu_prices[1].gpu_model Z_9000", code, out)
	}

	// Only an admin adds a model.
	z := map[string]any{"gpu_model": "Z_9000", "vendor": "other", "memory_gb": 64, "display_name": "Zeta 9000", "aliases": []string{"Z9000"}}
	if code, out := f.do(http.MethodPost, "/v1/gpu-models", f.finance, z); code != http.StatusForbidden {
		t.Fatalf("finance adds a model: HTTP %d %v, want 403", code, out)
	}
	code, out = f.do(http.MethodPost, "/v1/gpu-models", admin, z)
	if code != http.StatusOK || out["gpu_model"] != "Z_9000" || out["version"] != "1" {
		t.Fatalf("admin adds Z_9000: HTTP %d %v", code, out)
	}
	// An alias another model holds is refused, naming the field.
	code, out = f.do(http.MethodPost, "/v1/gpu-models", admin, map[string]any{"gpu_model": "Z_9001", "vendor": "other", "memory_gb": 64,
		"display_name": "Zeta 9001", "aliases": []string{"z9000"}})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out), "aliases[0]") {
		t.Fatalf("alias taken: HTTP %d %v, want 400 naming aliases[0]", code, out)
	}

	// The card pricing T4 and, by its alias, Z_9000 is accepted once pricing
	// has the new model (published as gpu_model.updated.Z_9000), stored
	// under the model's id.
	var card map[string]any
	testkit.Eventually(t, 20*time.Second, func() bool {
		code, card = f.do(http.MethodPost, "/v1/rate-cards", f.finance, map[string]any{"rate_card_id": "rc-t4", "currency": "CNY",
			"effective_from": "2026-01-01T00:00:00Z",
			"gpu_prices":     []map[string]string{{"gpu_model": "T4", "hourly": "1.00"}, {"gpu_model": "z9000", "hourly": "9.00"}}})
		return code == http.StatusOK
	}, "card pricing T4 and Z9000 accepted")
	if prices := fmt.Sprint(card["gpu_prices"]); !strings.Contains(prices, "gpu_model:Z_9000") {
		t.Errorf("card stored %s, want Z_9000 by its id", prices)
	}

	// T4 usage is accepted and charged; so is Z_9000 by its alias.
	start, end := dayUsage(time.Now(), 2) // 1.5 h
	evs := []any{
		map[string]any{"id": "evt-t4", "lease_id": "lease-t4", "provider_id": "p-001", "renter_id": "r-001", "gpu_model": "T4", "gpu_count": 2,
			"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)},
		map[string]any{"id": "evt-z", "lease_id": "lease-z", "provider_id": "p-001", "renter_id": "r-001", "gpu_model": "Z9000", "gpu_count": 1,
			"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)},
	}
	res := f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": evs})
	if fmt.Sprint(res["accepted"]) != "2" {
		t.Fatalf("T4 and Z9000 usage: %v, want both accepted", res)
	}
	// 2 × 1.5 h × 1.00 = 3.00 and 1 × 1.5 h × 9.00 = 13.50
	f.waitBalance("renter:r-001:wallet", "CNY", "83.50")
}

func toStrings(v any) []string {
	var out []string
	xs, _ := v.([]any)
	for _, x := range xs {
		out = append(out, fmt.Sprint(x))
	}
	return out
}
