// Package e2e drives the whole single-process stack through its public REST
// API, against real PostgreSQL, an in-process JetStream server and a real
// Temporal dev server.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
)

const secret = "gpubill-e2e-secret-0123456789abcdef"

type fixture struct {
	t       *testing.T
	cfg     stack.Config
	st      *stack.Stack
	base    string
	finance string
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, nil) }

// newFixtureAt is newFixture with the services' clock given.
func newFixtureAt(t *testing.T, clk clock.Clock) *fixture {
	t.Helper()
	return newFixtureWith(t, func(c *stack.Config) { c.Clock = clk })
}

// newFixtureWith starts the stack with cfg adjusted by adjust first.
func newFixtureWith(t *testing.T, adjust func(*stack.Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, testkit.NewDatabase(t), adjust)
}

// newFixtureOn is newFixtureWith on the database at dsn.
func newFixtureOn(t *testing.T, dsn string, adjust func(*stack.Config)) *fixture {
	t.Helper()
	cfg := stack.Config{
		Common: config.Common{
			DatabaseURL: dsn,
			HTTPAddr:    "127.0.0.1:0",
			GRPCAddr:    "127.0.0.1:0",
			DataDir:     t.TempDir(),
			AuthSecret:  secret,
			CycleDays:   45,
			CycleAnchor: "2026-01-01",
			CycleGrace:  24 * time.Hour,
		},
		NATSAddr:     "127.0.0.1:0",
		TemporalAddr: "127.0.0.1:0",
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	f := &fixture{t: t, cfg: cfg}
	f.start()
	tok, err := auth.Issue([]byte(secret), auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.finance = tok
	return f
}

func (f *fixture) start() {
	f.t.Helper()
	st, err := stack.Start(context.Background(), f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.st = st
	f.base = "http://" + st.HTTPAddr
	f.t.Cleanup(st.Stop)
}

func (f *fixture) do(method, path, token string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.t.Fatalf("%s %s: encode body: %v", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.base+path, rd)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	out := map[string]any{}
	// A JSON answer must decode: a check on a field of an answer that did
	// not decode would compare against an empty map and could pass. Plain
	// answers (/healthz, /readyz) are kept as text under "_text".
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			f.t.Fatalf("%s %s: HTTP %d answer is not a JSON object: %v: %q", method, path, resp.StatusCode, err, raw)
		}
	} else {
		out["_text"] = string(raw)
	}
	return resp.StatusCode, out
}

func (f *fixture) mustDo(method, path string, body any) map[string]any {
	f.t.Helper()
	code, out := f.do(method, path, f.finance, body)
	if code/100 != 2 {
		f.t.Fatalf("%s %s: HTTP %d %v", method, path, code, out)
	}
	return out
}

// balance returns the account's balance in currency ("0" if none).
func (f *fixture) balance(address, currency string) decimal.Decimal {
	f.t.Helper()
	code, out := f.do(http.MethodGet, "/v1/accounts/"+address, f.finance, nil)
	if code == http.StatusNotFound {
		return decimal.Zero
	}
	if code != http.StatusOK {
		f.t.Fatalf("GET account %s: HTTP %d %v", address, code, out)
	}
	bals, _ := out["balances"].([]any)
	for _, b := range bals {
		m := b.(map[string]any)
		if m["currency"] == currency {
			return decimal.RequireFromString(m["amount"].(string))
		}
	}
	return decimal.Zero
}

func (f *fixture) waitBalance(address, currency, want string) {
	f.t.Helper()
	w := decimal.RequireFromString(want)
	var got decimal.Decimal
	testkit.Eventually(f.t, 30*time.Second, func() bool {
		got = f.balance(address, currency)
		return got.Equal(w)
	}, "balance of %s: want %s", address, want)
}

// dayUsage returns a 1.5 h window inside Asia/Shanghai daytime (09:00–10:30
// local = 01:00–02:30 UTC), at least a few hours in the past.
func dayUsage(now time.Time, daysBack int) (time.Time, time.Time) {
	d := now.UTC().AddDate(0, 0, -daysBack)
	start := time.Date(d.Year(), d.Month(), d.Day(), 1, 0, 0, 0, time.UTC)
	if start.Add(3 * time.Hour).After(now) {
		start = start.AddDate(0, 0, -1)
	}
	return start, start.Add(90 * time.Minute)
}

func TestUsageToLedgerThroughRESTAndRestart(t *testing.T) {
	f := newFixture(t)

	// Health and auth.
	if code, _ := f.do(http.MethodGet, "/healthz", "", nil); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, _ := f.do(http.MethodGet, "/readyz", "", nil)
		return code == http.StatusOK
	}, "readyz")
	if code, _ := f.do(http.MethodGet, "/v1/accounts/bank:client", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d, want 401", code)
	}

	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})
	// A replayed deposit changes nothing.
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})

	start, end := dayUsage(time.Now(), 2)
	cycle := cycles.Default().ForUsageEnd(end).ID
	ev := map[string]any{"id": "evt-1", "lease_id": "lease-1", "provider_id": "p-001", "renter_id": "r-001",
		"gpu_model": "RTX_4090", "gpu_count": 2, "start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339),
		"region": "cn-east", "workload": "training"}
	res := f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{ev}})
	if fmt.Sprint(res["accepted"]) != "1" {
		t.Fatalf("ingest: %v", res)
	}
	// 2 GPUs × 1.5 h × 2.80 = 8.40
	f.waitBalance("renter:r-001:wallet", "CNY", "91.60")
	f.waitBalance("provider:p-001:pending:"+cycle, "CNY", "8.40")
	f.waitBalance("bank:client", "CNY", "100.00")

	// Every consumer has caught up: nothing pending, nothing unacked.
	testkit.Eventually(t, 10*time.Second, func() bool {
		code, lag := f.do(http.MethodGet, "/v1/ops/consumer-lag", f.finance, nil)
		cons, _ := lag["consumers"].([]any)
		if code != http.StatusOK || len(cons) < 3 {
			return false
		}
		for _, c := range cons {
			m := c.(map[string]any)
			if m["pending"].(float64) != 0 || m["ack_pending"].(float64) != 0 {
				return false
			}
		}
		return true
	}, "consumer lag drains")
	if code, _ := f.do(http.MethodGet, "/v1/ops/consumer-lag", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("consumer lag without token: HTTP %d", code)
	}

	// gpubill dev serves every service's dead letters on one path (none so far).
	if code, dl := f.do(http.MethodGet, "/v1/ops/dead-letters", f.finance, nil); code != http.StatusOK || len(dl["dead_letters"].([]any)) != 0 {
		t.Fatalf("dead letters: HTTP %d %v", code, dl)
	}
	for _, schema := range []string{"ledger", "pricing"} {
		if _, err := f.st.Pool.Exec(context.Background(), `insert into `+schema+`.dead_letters (consumer, message_id, subject, payload, error,
			attempts, first_seen_at, last_seen_at) values ('c', 'm', 's', '', 'e', 1, now(), now())`); err != nil {
			t.Fatal(err)
		}
	}
	if code, dl := f.do(http.MethodGet, "/v1/ops/dead-letters", f.finance, nil); code != http.StatusOK || fmt.Sprint(dl["dead_letters"]) == "" ||
		len(dl["dead_letters"].([]any)) != 2 || dl["dead_letters"].([]any)[0].(map[string]any)["id"] != "ledger-1" || dl["dead_letters"].([]any)[1].(map[string]any)["id"] != "pricing-1" {
		t.Fatalf("dead letters of two services: HTTP %d %v", code, dl)
	}
	for _, schema := range []string{"ledger", "pricing"} {
		if _, err := f.st.Pool.Exec(context.Background(), `delete from `+schema+`.dead_letters`); err != nil {
			t.Fatal(err)
		}
	}

	// The same event again is a duplicate and changes nothing.
	res = f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{ev}})
	if fmt.Sprint(res["duplicates"]) != "1" {
		t.Fatalf("replay: %v", res)
	}

	// Kill the stack and start it again on the same database and data dir:
	// nothing is lost, and new usage still flows.
	f.st.Stop()
	f.start()
	f.waitBalance("renter:r-001:wallet", "CNY", "91.60")
	ev2 := map[string]any{"id": "evt-2", "lease_id": "lease-1", "provider_id": "p-001", "renter_id": "r-001",
		"gpu_model": "RTX_4090", "gpu_count": 2, "start_time": end.Format(time.RFC3339), "end_time": end.Add(30 * time.Minute).Format(time.RFC3339),
		"region": "cn-east", "workload": "training"}
	f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{ev2}})
	// 2 × 0.5 h × 2.80 = 2.80 more.
	f.waitBalance("renter:r-001:wallet", "CNY", "88.80")
	f.waitBalance("provider:p-001:pending:"+cycle, "CNY", "11.20")
	res = f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{ev}})
	if fmt.Sprint(res["duplicates"]) != "1" {
		t.Fatalf("replay after restart: %v", res)
	}
}

// TestSettleCycleThroughREST closes a cycle through the API and checks every
// account the settlement moves, to the cent, and the provider's statement.
func TestSettleCycleThroughREST(t *testing.T) {
	f := newFixture(t)
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})
	start, end := dayUsage(time.Now(), 1)
	cycle := cycles.Default().ForUsageEnd(end).ID
	f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": "evt-1", "lease_id": "lease-1",
		"provider_id": "p-001", "renter_id": "r-001", "gpu_model": "RTX_4090", "gpu_count": 2,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
	f.waitBalance("provider:p-001:pending:"+cycle, "CNY", "8.40")

	// A provider may read its own statements, not another's.
	other := testkit.Token(t, []byte(secret), auth.RoleProvider, "p-002", time.Hour)
	if code, _ := f.do(http.MethodGet, "/v1/providers/p-001/statements", other, nil); code != http.StatusForbidden && code != http.StatusNotFound {
		t.Fatalf("another provider's statements: HTTP %d", code)
	}

	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})
	testkit.Eventually(t, 60*time.Second, func() bool {
		_, c := f.do(http.MethodGet, "/v1/settlement-cycles/"+cycle, f.finance, nil)
		return c["status"] == "settled"
	}, "cycle %s settled", cycle)
	// Closing twice changes nothing.
	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})

	// gross 8.40 = commission 2.10 (standard 25 %) + tax 1.26 (20 % of 6.30) + net 5.04
	f.waitBalance("provider:p-001:pending:"+cycle, "CNY", "0")
	f.waitBalance("provider:p-001:available", "CNY", "5.04")
	f.waitBalance("tax:withheld:CN", "CNY", "1.26")
	f.waitBalance("platform:revenue:commission", "CNY", "2.10")
	f.waitBalance("bank:operating", "CNY", "2.10")
	f.waitBalance("bank:client", "CNY", "97.90")

	own := testkit.Token(t, []byte(secret), auth.RoleProvider, "p-001", time.Hour)
	code, st := f.do(http.MethodGet, "/v1/providers/p-001/statements?cycle_id="+cycle, own, nil)
	if code != http.StatusOK {
		t.Fatalf("statements: HTTP %d %v", code, st)
	}
	stmts, _ := st["statements"].([]any)
	if len(stmts) != 1 {
		t.Fatalf("statements: %v", st)
	}
	s := stmts[0].(map[string]any)
	for k, want := range map[string]string{"gross": "8.40", "commission": "2.10", "tax_withheld": "1.26", "net": "5.04", "currency": "CNY"} {
		if s[k] != want {
			t.Errorf("statement %s = %v, want %s", k, s[k], want)
		}
	}
	lines, _ := s["lines"].([]any)
	if len(lines) != 1 || lines[0].(map[string]any)["lease_id"] != "lease-1" || lines[0].(map[string]any)["gpu_model"] != "RTX_4090" {
		t.Errorf("statement lines: %v", lines)
	}

	// The client-money report balances after the settlement.
	_, rep := f.do(http.MethodGet, "/v1/reports/segregated-funds?currency=CNY", f.finance, nil)
	if rep["verdict"] != "balanced" || rep["difference"] != "0.00" {
		t.Errorf("segregated funds: %v", rep)
	}
}

// TestPayoutPaidThroughStack settles a provider and follows its payout to
// paid on the sandbox rail with the stack's own service identity (the
// payout worker reads provider:{id}:available and posts to the ledger as
// role service): the accounts are exact at the end.
func TestPayoutPaidThroughStack(t *testing.T) {
	f := newFixture(t)
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-pay", "name": "Rig Pay", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-pay", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "100.00"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-pay", "amount": "500.00", "currency": "CNY", "external_ref": "bank-ref-pay"})
	f.mustDo(http.MethodPut, "/v1/providers/p-pay/kyc", map[string]any{"status": "verified", "reference": "kyc-pay"})
	f.mustDo(http.MethodPut, "/v1/providers/p-pay/payout-method", map[string]any{"type": "bank", "account_name": "Rig Pay Ltd",
		"account_number": "6222000011110001", "bank_code": "ICBKCNBJ"})
	start, end := dayUsage(time.Now(), 1)
	cycle := cycles.Default().ForUsageEnd(end).ID
	f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": "evt-pay", "lease_id": "lease-pay",
		"provider_id": "p-pay", "renter_id": "r-pay", "gpu_model": "RTX_4090", "gpu_count": 2,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
	// gross 300.00 = commission 75.00 + tax 45.00 (20 % of 225.00) + net 180.00
	f.waitBalance("provider:p-pay:pending:"+cycle, "CNY", "300.00")
	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})

	var last map[string]any
	testkit.Eventually(t, 90*time.Second, func() bool {
		_, out := f.do(http.MethodGet, "/v1/providers/p-pay/payouts", f.finance, nil)
		ps, _ := out["payouts"].([]any)
		if len(ps) == 0 {
			return false
		}
		last = ps[0].(map[string]any)
		return last["status"] == "paid"
	}, "payout of p-pay paid (last seen: %v)", &last)
	if last["net"] != "180.00" || last["rail_reference"] != last["payout_id"] {
		t.Errorf("payout %v", last)
	}
	f.waitBalance("provider:p-pay:available", "CNY", "0")
	f.waitBalance("provider:p-pay:in_transit", "CNY", "0")
	f.waitBalance("bank:client", "CNY", "245.00") // 500 deposited − 75 commission swept − 180 paid
}
