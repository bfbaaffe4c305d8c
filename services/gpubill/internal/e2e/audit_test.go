package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/pricing"
)

// TestAuditLogThroughREST: writes through the single-binary stack (any
// service, any outcome) land in GET /v1/audit-events with who, role, what,
// resource ids, when, request id and result; reads do not; the filters and
// pages work; the table refuses updates, deletes and truncation.
func TestAuditLogThroughREST(t *testing.T) {
	f := newFixture(t)
	start := time.Now().Add(-time.Second)
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-a1", "name": "A", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-a1", "name": "R", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-a1", "amount": "5.00", "currency": "CNY", "external_ref": "audit-dep-1"})
	f.mustDo(http.MethodGet, "/v1/accounts/renter:r-a1:wallet", nil) // a read: not audited
	renter := testkit.Token(t, []byte(secret), auth.RoleRenter, "r-a1", time.Hour)
	if code, _ := f.do(http.MethodPost, "/v1/deposits", renter, map[string]any{"renter_id": "r-a1", "amount": "1.00", "currency": "CNY", "external_ref": "self"}); code != http.StatusForbidden {
		t.Fatalf("renter deposit: HTTP %d, want 403", code)
	}
	provider := testkit.Token(t, []byte(secret), auth.RoleProvider, "p-a1", time.Hour)
	if code, out := f.do(http.MethodPut, "/v1/providers/p-a1/kyc", provider, map[string]any{"status": "pending", "reference": "doc-1"}); code/100 != 2 {
		t.Fatalf("provider kyc: HTTP %d %v", code, out)
	}

	// The stack's own calls between services (role service: settlement
	// closing ledger cycles, say) are audited too, at times of their own;
	// the test counts the writes it made.
	events := func(query string) []map[string]any {
		t.Helper()
		code, out := f.do(http.MethodGet, "/v1/audit-events?"+query, f.finance, nil)
		if code != http.StatusOK {
			t.Fatalf("audit events ?%s: HTTP %d %v", query, code, out)
		}
		var evs []map[string]any
		for _, e := range out["events"].([]any) {
			if e.(map[string]any)["role"] != auth.RoleService {
				evs = append(evs, e.(map[string]any))
			}
		}
		return evs
	}
	var all []map[string]any
	testkit.Eventually(t, 30*time.Second, func() bool { all = events("page_size=100"); return len(all) >= 5 },
		"five writes audited (have %d)", len(all))
	if len(all) != 5 {
		t.Fatalf("audit events: %d, want exactly the 5 writes: %v", len(all), all)
	}
	byMethod := map[string]map[string]any{}
	for _, e := range all {
		byMethod[fmt.Sprint(e["method"], "|", e["code"])] = e
		if e["request_id"] == "" || e["client_addr"] != "127.0.0.1" || e["at"] == nil {
			t.Errorf("event without request id, client address or time: %v", e)
		}
	}
	dep := byMethod["/gpubill.ledger.v1.LedgerService/CreateDeposit|OK"]
	if dep == nil || dep["role"] != "finance" || dep["service"] != "ledger" ||
		!slices.Contains(dep["resource_ids"].([]any), any("renter_id=r-a1")) || !slices.Contains(dep["resource_ids"].([]any), any("external_ref=audit-dep-1")) {
		t.Fatalf("deposit event %v (all %v)", dep, byMethod)
	}
	denied := byMethod["/gpubill.ledger.v1.LedgerService/CreateDeposit|PermissionDenied"]
	if denied == nil || denied["actor"] != "r-a1" || denied["role"] != "renter" {
		t.Fatalf("refused deposit not audited as such: %v", byMethod)
	}
	kyc := byMethod["/gpubill.payout.v1.PayoutService/PutKyc|OK"]
	if kyc == nil || kyc["actor"] != "p-a1" || kyc["service"] != "payout" {
		t.Fatalf("provider's kyc write: %v", byMethod)
	}
	if byMethod["/gpubill.metering.v1.PartyService/CreateProvider|OK"] == nil || byMethod["/gpubill.metering.v1.PartyService/CreateRenter|OK"] == nil {
		t.Fatalf("metering writes missing: %v", byMethod)
	}

	// Filters and pages.
	if evs := events("actor=p-a1"); len(evs) != 1 || evs[0]["method"] != "/gpubill.payout.v1.PayoutService/PutKyc" {
		t.Fatalf("actor filter: %v", evs)
	}
	if evs := events("method=CreateDeposit"); len(evs) != 2 {
		t.Fatalf("method filter: %v", evs)
	}
	if evs := events("from=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))); len(evs) != 0 {
		t.Fatalf("from an hour ahead: %v", evs)
	}
	if evs := events("from=" + url.QueryEscape(start.Format(time.RFC3339Nano)) + "&to=" + url.QueryEscape(time.Now().Add(time.Minute).Format(time.RFC3339))); len(evs) != 5 {
		t.Fatalf("time range: %d events", len(evs))
	}
	seen := map[string]bool{}
	token := ""
	for page := 0; page < 50; page++ {
		code, out := f.do(http.MethodGet, "/v1/audit-events?page_size=2&page_token="+token, f.finance, nil)
		if code != http.StatusOK {
			t.Fatalf("page %d: HTTP %d", page, code)
		}
		for _, e := range out["events"].([]any) {
			if e.(map[string]any)["role"] != auth.RoleService {
				seen[e.(map[string]any)["event_id"].(string)] = true
			}
		}
		if token = out["next_page_token"].(string); token == "" {
			break
		}
	}
	if len(seen) != 5 {
		t.Fatalf("pages of 2 gave %d distinct events, want 5", len(seen))
	}

	// Append-only, enforced by the database.
	conn, err := pgx.Connect(context.Background(), f.cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{"update ledger.audit_events set actor = 'someone-else'", "delete from ledger.audit_events", "truncate ledger.audit_events"} {
		if _, err := conn.Exec(context.Background(), q); err == nil {
			t.Errorf("%s: accepted", q)
		}
	}
	if evs := events("actor=r-a1"); len(evs) != 1 {
		t.Fatalf("after tampering attempts: %v", evs)
	}
}

// TestAuditAcrossSeparateServices: with services as separate servers (each
// its own pool, schema, outbox and listener, as cmd/<service> runs them;
// only PostgreSQL and NATS shared), a write served by pricing reaches the
// ledger's audit log through pricing's outbox and audit.recorded.pricing.
func TestAuditAcrossSeparateServices(t *testing.T) {
	ctx := testkit.Context(t)
	_, dsn := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := natsx.EnsureStreams(ctx, js.JS, natsx.StreamAudit); err != nil {
		t.Fatal(err)
	}
	start := func(name string, build func(svc.Deps) (svc.Service, error)) string {
		pool, err := pg.Open(ctx, dsn, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := build(svc.Deps{Pool: pool, JS: js.JS, Log: log, Clock: clock.System{}, Calendar: cycles.Default()})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.Start(ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: []byte(secret), Log: log,
			Services: []server.Service{s}, Audit: audit.New(audit.PoolStore{Pool: pool}, log, name)})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(runCtx) }()
		t.Cleanup(func() {
			srv.Shutdown(context.Background())
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		})
		return "http://" + srv.HTTPAddr
	}
	ledgerURL := start("ledger", func(d svc.Deps) (svc.Service, error) { return ledger.New(ctx, d) })
	pricingURL := start("pricing", func(d svc.Deps) (svc.Service, error) { return pricing.New(ctx, d) })

	fin := testkit.Token(t, []byte(secret), auth.RoleFinance, "alice", time.Hour)
	pf := &fixture{t: t, base: pricingURL}
	if code, out := pf.do(http.MethodPost, "/v1/rate-cards", fin, map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}}); code != http.StatusOK {
		t.Fatalf("rate card: HTTP %d %v", code, out)
	}
	lf := &fixture{t: t, base: ledgerURL}
	var evs []any
	testkit.Eventually(t, 20*time.Second, func() bool {
		_, out := lf.do(http.MethodGet, "/v1/audit-events?actor=alice", fin, nil)
		evs, _ = out["events"].([]any)
		return len(evs) > 0
	}, "pricing's write in the ledger's audit log")
	e := evs[0].(map[string]any)
	if len(evs) != 1 || e["method"] != "/gpubill.pricing.v1.PricingService/CreateRateCard" || e["service"] != "pricing" || e["code"] != "OK" {
		t.Fatalf("audit events: %v", evs)
	}
}

// A change of the payout settings is audited (who, what, the code), beside
// the settings' own history.
func TestPayoutSettingsChangeAudited(t *testing.T) {
	f := newFixture(t)
	if code, out := f.do(http.MethodPatch, "/v1/payout-settings", f.finance, map[string]any{"minimums": map[string]string{"USD": "20.00"}, "reason": "audit test"}); code != http.StatusOK {
		t.Fatalf("PATCH payout settings: HTTP %d %v", code, out)
	}
	var evs []any
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, out := f.do(http.MethodGet, "/v1/audit-events?method=UpdatePayoutSettings", f.finance, nil)
		if code != http.StatusOK {
			return false
		}
		evs, _ = out["events"].([]any)
		return len(evs) == 1
	}, "the settings change audited")
	e := evs[0].(map[string]any)
	if e["service"] != "payout" || e["role"] != "finance" || e["code"] != "OK" {
		t.Fatalf("audit event %v", e)
	}
}

// A provider's Alipay id (a phone number or e-mail) set through REST is in
// the audit log masked, as the payout service shows it, never in clear.
func TestPayoutMethodAuditedMasked(t *testing.T) {
	f := newFixture(t)
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-am", "name": "A", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	provider := testkit.Token(t, []byte(secret), auth.RoleProvider, "p-am", time.Hour)
	const alipayID = "13800138000"
	if code, out := f.do(http.MethodPut, "/v1/providers/p-am/payout-method", provider,
		map[string]any{"type": "alipay", "account_name": "Li Lei", "alipay_id": alipayID}); code != http.StatusOK {
		t.Fatalf("PUT payout method: HTTP %d %v", code, out)
	}
	var out map[string]any
	testkit.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, out = f.do(http.MethodGet, "/v1/audit-events?method=PutPayoutMethod", f.finance, nil)
		evs, _ := out["events"].([]any)
		return code == http.StatusOK && len(evs) == 1
	}, "the payout method change audited")
	e := out["events"].([]any)[0].(map[string]any)
	ids := e["resource_ids"].([]any)
	if e["actor"] != "p-am" || e["code"] != "OK" || !slices.Contains(ids, any("provider_id=p-am")) || !slices.Contains(ids, any("alipay_id=****8000")) {
		t.Fatalf("audit event %v, want provider_id=p-am and alipay_id=****8000 among its resource ids", e)
	}
	if b, err := json.Marshal(out); err != nil || strings.Contains(string(b), alipayID) {
		t.Fatalf("the audit log holds the Alipay id in clear: %s (%v)", b, err)
	}
}
