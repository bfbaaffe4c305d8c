package payoutstack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

type settingsAnswer struct {
	Minimums []struct {
		Currency, Amount, Source string
	}
	WebhookRotationGrace       string `json:"webhook_rotation_grace"`
	WebhookRotationGraceSource string `json:"webhook_rotation_grace_source"`
	Changes                    []struct {
		Setting  string `json:"setting"`
		OldValue string `json:"old_value"`
		NewValue string `json:"new_value"`
		Actor    string `json:"actor"`
		Reason   string `json:"reason"`
	}
}

func (a settingsAnswer) minimum(cur string) (amount, source string) {
	for _, m := range a.Minimums {
		if m.Currency == cur {
			return m.Amount, m.Source
		}
	}
	return "", ""
}

func decodeSettings(t *testing.T, body string) settingsAnswer {
	t.Helper()
	var a settingsAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("settings answer %s: %v", body, err)
	}
	return a
}

// Payout settings: read by finance, admin and auditors, set by finance and
// admin over the environment's defaults (each value says where it comes
// from), every change kept with who made it and why. A payout waiting
// under the CNY minimum goes out once finance lowers it; the default
// grace of a webhook secret rotation follows its setting; an empty value
// returns a setting to the environment's default. Bad values are 400s
// naming the field and change nothing.
func TestPayoutSettingsThroughTheAPI(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{WebhookAllowPrivate: true, Minimums: map[string]decimal.Decimal{"CNY": decimal.RequireFromString("100.00"),
		"USD": decimal.RequireFromString("30.00")}}) // USD as GPUBILL_PAYOUT_MINIMUMS=USD=30.00 would set it
	code, body := st.restAs(t, "GET", "/v1/payout-settings", auth.RoleAuditor, "", "")
	a := decodeSettings(t, body)
	if amt, src := a.minimum("CNY"); code != 200 || amt != "100.00" || src != "default" {
		t.Fatalf("GET settings: %d CNY %s %s: %s", code, amt, src, body)
	}
	if amt, src := a.minimum("USD"); amt != "30.00" || src != "env" || a.WebhookRotationGrace != "24h0m0s" || a.WebhookRotationGraceSource != "default" {
		t.Fatalf("GET settings: USD %s %s, grace %s %s", amt, src, a.WebhookRotationGrace, a.WebhookRotationGraceSource)
	}
	for _, c := range []struct{ method, role, sub, body string }{
		{"GET", auth.RoleProvider, "p-set", ""},
		{"PATCH", auth.RoleProvider, "p-set", `{"minimums":{"CNY":"1.00"}}`},
		{"PATCH", auth.RoleAuditor, "", `{"minimums":{"CNY":"1.00"}}`},
	} {
		if code, body := st.restAs(t, c.method, "/v1/payout-settings", c.role, c.sub, c.body); code != http.StatusForbidden {
			t.Errorf("%s as %s: %d %s", c.method, c.role, code, body)
		}
	}

	// 80.00 CNY waits under the 100.00 minimum.
	st.setup(t, "p-set", "6222000011118881")
	st.settle(t, "p-set", "cyc-20260101", "CNY", "80.00")
	p := st.waitStatus(t, "p-set", "cyc-20260101", "action_required", waitLong)
	if !strings.Contains(p.StatusReason, "under minimum 100.00 CNY") {
		t.Fatalf("reason %q", p.StatusReason)
	}

	for _, bad := range []struct{ body, field string }{
		{`{"minimums":{"XYZ":"1.00"}}`, "minimums.XYZ"},
		{`{"minimums":{"cny":"1.00"}}`, "minimums.cny"},
		{`{"minimums":{"CNY":"1.001"}}`, "minimums.CNY"},
		{`{"minimums":{"CNY":"-1.00"}}`, "minimums.CNY"},
		{`{"minimums":{"CNY":"lots"}}`, "minimums.CNY"},
		{`{"webhook_rotation_grace":"9000h"}`, "webhook_rotation_grace"},
		{`{"webhook_rotation_grace":"soon"}`, "webhook_rotation_grace"},
		{`{"minimums":{"CNY":"50.00"},"reason":"` + strings.Repeat("x", 501) + `"}`, "reason"},
		{`{}`, "body"},
	} {
		code, body := st.restAs(t, "PATCH", "/v1/payout-settings", auth.RoleFinance, "", bad.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"field":"`+bad.field+`"`) {
			t.Errorf("PATCH %.60s: %d %s, want 400 naming %s", bad.body, code, body, bad.field)
		}
	}
	if _, body := st.restAs(t, "GET", "/v1/payout-settings", auth.RoleFinance, "", ""); len(decodeSettings(t, body).Changes) != 0 {
		t.Fatalf("a refused change was kept: %s", body)
	}

	code, body = st.restAs(t, "PATCH", "/v1/payout-settings", auth.RoleFinance, "", `{"minimums":{"CNY":"50"},"webhook_rotation_grace":"2h","reason":"pilot"}`)
	a = decodeSettings(t, body)
	if amt, src := a.minimum("CNY"); code != 200 || amt != "50.00" || src != "api" || a.WebhookRotationGrace != "2h0m0s" || a.WebhookRotationGraceSource != "api" {
		t.Fatalf("PATCH: %d %s", code, body)
	}
	if len(a.Changes) != 2 || a.Changes[0].Actor != "finance" || a.Changes[0].Reason != "pilot" {
		t.Fatalf("changes kept: %+v", a.Changes)
	}
	// The waiting payout is gated again with the new minimum and goes out.
	st.waitStatus(t, "p-set", "cyc-20260101", "paid", waitLong)

	// A rotation without a grace period takes the setting's 2 h.
	wh, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-set"), &payoutv1.CreateWebhookRequest{ProviderId: "p-set", Url: "http://127.0.0.1:9/hook", Secret: "whsec-0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	rot, err := st.s.API().RotateWebhookSecret(as(auth.RoleProvider, "p-set"), &payoutv1.RotateWebhookSecretRequest{ProviderId: "p-set",
		WebhookId: wh.Webhook.WebhookId, Secret: "whsec-abcdef0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(rot.Webhook.PreviousSecretExpiresAt.AsTime()); left < 119*time.Minute || left > 121*time.Minute {
		t.Errorf("rotation grace %s, want the setting's 2h", left)
	}

	// Back to the environment's default.
	code, body = st.restAs(t, "PATCH", "/v1/payout-settings", auth.RoleAdmin, "", `{"minimums":{"CNY":""},"reason":"pilot over"}`)
	a = decodeSettings(t, body)
	if amt, src := a.minimum("CNY"); code != 200 || amt != "100.00" || src != "default" || len(a.Changes) != 3 ||
		a.Changes[0].Setting != "minimums.CNY" || a.Changes[0].OldValue != "50.00" || a.Changes[0].NewValue != "" || a.Changes[0].Actor != "admin" {
		t.Fatalf("PATCH back to default: %d %s", code, body)
	}
}
