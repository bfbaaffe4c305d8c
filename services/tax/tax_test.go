package tax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// ledgerConn answers the two ledger calls tax makes: CreateTransaction (a
// remittance, recorded in reqs and kept under its key, a replay of the key
// answering the transaction first posted) and ListTransactions by
// idempotency keys (the settlements posted, settle, and the remittances).
type ledgerConn struct {
	mu      sync.Mutex
	reqs    []*ledgerv1.CreateTransactionRequest
	settled map[string]*ledgerv1.Transaction               // by idempotency key: settlements and remittances
	refuse  func(*ledgerv1.CreateTransactionRequest) error // optional: a remittance the ledger refuses
	down    error                                          // optional: every call fails with it (the ledger unreachable)
	failed  int                                            // calls that failed with down
}

func (l *ledgerConn) Invoke(_ context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down != nil {
		l.failed++
		return l.down
	}
	switch method {
	case ledgerv1.LedgerService_CreateTransaction_FullMethodName:
		req := args.(*ledgerv1.CreateTransactionRequest)
		if l.refuse != nil {
			if err := l.refuse(req); err != nil {
				return err
			}
		}
		l.reqs = append(l.reqs, req)
		// Posted under its key, as the ledger keeps it: a listing by the
		// key answers it (ReversedBy once a test reverses it).
		tx := l.settled[req.IdempotencyKey]
		if tx == nil {
			tx = &ledgerv1.Transaction{TransactionId: "tx-" + req.IdempotencyKey, IdempotencyKey: req.IdempotencyKey, Postings: req.Postings}
			if l.settled == nil {
				l.settled = map[string]*ledgerv1.Transaction{}
			}
			l.settled[req.IdempotencyKey] = tx
		}
		// A replay answers the transaction as the ledger holds it now,
		// reversed_by included (the ledger's replay loads it).
		reply.(*ledgerv1.CreateTransactionResponse).Transaction = &ledgerv1.Transaction{TransactionId: tx.TransactionId, ReversedBy: tx.ReversedBy}
	case ledgerv1.LedgerService_ListTransactions_FullMethodName:
		resp := reply.(*ledgerv1.ListTransactionsResponse)
		for _, k := range args.(*ledgerv1.ListTransactionsRequest).IdempotencyKeys {
			if tx := l.settled[k]; tx != nil {
				resp.Transactions = append(resp.Transactions, tx)
			}
		}
	default:
		return status.Errorf(codes.Unimplemented, "%s", method)
	}
	return nil
}

// settle has the ledger post a withholding's settlement under its key,
// crediting tax to tax:withheld:{jurisdiction} (with the net, which a
// remittance does not read).
func (l *ledgerConn) settle(key, jurisdiction, currency, tax string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled == nil {
		l.settled = map[string]*ledgerv1.Transaction{}
	}
	l.settled[key] = &ledgerv1.Transaction{TransactionId: "tx-" + key, IdempotencyKey: key, Postings: []*ledgerv1.Posting{
		{Account: "tax:withheld:" + jurisdiction, Direction: "credit", Amount: tax, Currency: currency},
		{Account: "provider:p:available", Direction: "credit", Amount: "1.00", Currency: currency},
	}}
}

func (l *ledgerConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

func newTax(t *testing.T) (*Service, *ledgerConn, *clock.Manual) {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	l := &ledgerConn{}
	clk := clock.NewManual(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC))
	s, err := New(context.Background(), svc.Deps{Pool: pool, Log: slog.New(slog.DiscardHandler), Clock: clk, Calendar: cycles.Default(), Internal: l})
	if err != nil {
		t.Fatal(err)
	}
	return s, l, clk
}

// code is the gRPC code the server's interceptor would answer with.
func code(err error) codes.Code { return status.Code(apperr.ToStatus(err)) }

func as(role, sub string) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{Role: role, Subject: sub})
}

// remitted remits period as finance and fails t on an error.
func remitted(t *testing.T, s *Service, period string) *taxv1.RemitTaxResponse {
	t.Helper()
	resp, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: period})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// compute records a withholding, and the ledger posts its settlement.
func compute(t *testing.T, s *Service, provider, gross, rate, profile, key string) *taxv1.ComputeWithholdingResponse {
	t.Helper()
	resp := record(t, s, provider, gross, rate, profile, key)
	s.d.Internal.(*ledgerConn).settle(key, resp.Jurisdiction, resp.Currency, resp.TaxWithheld)
	return resp
}

// record records a withholding whose settlement the ledger has not posted:
// of a provider the tax service knows (party.updated applied) when profile
// is "", else of the profile given, in CN.
func record(t *testing.T, s *Service, provider, gross, rate, profile, key string) *taxv1.ComputeWithholdingResponse {
	t.Helper()
	jurisdiction := ""
	if profile != "" {
		jurisdiction = "CN"
	}
	resp, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
		ProviderId: provider, CycleId: "cyc-20260101", Currency: "CNY", Gross: gross, CommissionRate: rate,
		TaxProfile: profile, Jurisdiction: jurisdiction, IdempotencyKey: key,
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// known applies a provider's party.updated to the tax profiles, as the
// consumer of party.updated does.
func known(t *testing.T, s *Service, provider, profile, jurisdiction string, version int64) {
	t.Helper()
	profiles := &app.ProviderProfiles{Store: s.store.PartyStore(), Consumer: app.PartyConsumer}
	err := profiles.Apply(context.Background(), []app.ProfileUpdate{{ID: fmt.Sprintf("party-%s-%d", provider, version), Keep: true,
		Row: domain.Profile{ProviderID: provider, TaxProfile: profile, Jurisdiction: jurisdiction, Version: version}}})
	if err != nil {
		t.Fatal(err)
	}
}

// Both rule sets through the API: flat20 by default (individuals 20 % of
// gross − commission, enterprises 0 %), cn_labour once selected for the
// jurisdiction or one provider; each withholding records its rule version.
func TestRuleSets(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	clk.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) // the selections are made while cyc-20260101 runs
	tests := []struct {
		give                       string // provider
		gross, rate, profile       string
		selectJ, selectP           string // rule set selections made before
		wantTax, wantNet, wantRule string
	}{
		{"p-1", "1000.00", "0.25", "individual", "", "", "150.00", "600.00", "flat20"},
		{"p-2", "1000.00", "0.15", "enterprise", "", "", "0.00", "850.00", "flat20"},
		{"p-3", "33.33", "0.25", "", "", "", "5.00", "20.00", "flat20"},
		{"p-4", "5000.00", "0.20", "individual", "", "cn_labour", "640.00", "3360.00", "cn_labour"}, // (4000−800)×20 %
		{"p-5", "3000.00", "0.20", "individual", "cn_labour", "", "320.00", "2080.00", "cn_labour"}, // (2400−800)×20 %
		{"p-6", "50000.00", "0.20", "individual", "", "", "7600.00", "32400.00", "cn_labour"},       // base 40000: 32000×30 %−2000
	}
	known(t, s, "p-3", "individual", "CN", 1) // p-3's withholding reads its profile
	for _, tt := range tests {
		if tt.selectP != "" {
			if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{ProviderId: tt.give, RuleSet: tt.selectP}); err != nil {
				t.Fatal(err)
			}
		}
		if tt.selectJ != "" {
			if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: tt.selectJ}); err != nil {
				t.Fatal(err)
			}
		}
		got := compute(t, s, tt.give, tt.gross, tt.rate, tt.profile, "k-"+tt.give)
		if got.TaxWithheld != tt.wantTax || got.Net != tt.wantNet || got.RuleSet != tt.wantRule || got.RuleVersion != "1" || got.Jurisdiction != "CN" {
			t.Errorf("%s: got tax %s net %s rule %s v%s j %s; want %s %s %s v1 CN", tt.give, got.TaxWithheld, got.Net, got.RuleSet, got.RuleVersion, got.Jurisdiction, tt.wantTax, tt.wantNet, tt.wantRule)
		}
	}
	// A replay returns the original, even after the selection changed.
	again := compute(t, s, "p-1", "1000.00", "0.25", "individual", "k-p-1")
	if again.RuleSet != "flat20" || again.TaxWithheld != "150.00" {
		t.Errorf("replay = %v", again)
	}
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "flat99"}); code(err) != codes.InvalidArgument {
		t.Errorf("unknown rule set: %v, want InvalidArgument", err)
	}
}

// cn_labour's thresholds are yuan: a CN individual paid in JPY under it is
// withheld by the default rule set (JPY 100 000 had JPY 17 000 withheld,
// its base taken for yuan). Refused instead (a failed precondition), the
// provider's settlement failed for good: the selection finance made to fix
// it applies to cycles ending after it, never to the one refused.
func TestCNLabourPassesAnotherCurrencyToTheDefault(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	clk.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) // the selection is made while cyc-20260101 runs
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "cn_labour"}); err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC)) // the cycle settles
	for _, req := range []*taxv1.ComputeWithholdingRequest{
		{ProviderId: "p-7", CycleId: "cyc-20260101", Currency: "JPY", Gross: "100000", CommissionRate: "0.25", IdempotencyKey: "k-jpy",
			TaxProfile: "individual", Jurisdiction: "CN"},
		{ProviderId: "p-7", CycleId: "cyc-20260101", Currency: "JPY", Gross: "100000", Commission: "25000", IdempotencyKey: "k-jpy-c",
			TaxProfile: "individual", Jurisdiction: "CN"},
	} {
		got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req)
		if err != nil || got.RuleSet != "flat20" || got.TaxWithheld != "15000" {
			t.Errorf("%s: %v, %v; want flat20, 15000 (20 %% of 75 000)", req.IdempotencyKey, got, err)
		}
	}
	// The same payment in yuan is cn_labour's; an enterprise's 0 % holds.
	if got := compute(t, s, "p-6", "1000.00", "0.25", "individual", "k-cny"); got.RuleSet != "cn_labour" {
		t.Errorf("individual in CNY: %+v", got)
	}
	got := compute(t, s, "p-8", "1000.00", "0.25", "enterprise", "k-ent")
	if got.TaxWithheld != "0.00" || got.RuleSet != "cn_labour" {
		t.Errorf("enterprise in CNY: %+v", got)
	}
}

// A rule set selection applies to the cycles ending after it was made: one
// made while a cycle settles split that cycle's providers between two rule
// sets (150.00 withheld from one, 0.00 from the next of the same gross). A
// rule of one jurisdiction is passed over for a provider of another
// (cn_labour selected for a provider since moved to US withheld Chinese
// labour tax, remitted from tax:withheld:US; then it was refused, and the
// provider's settlement failed for good).
func TestRuleSelectionAppliesFromItsDay(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t) // 2026-02-20: cyc-20260101 ended on 02-15 and settles
	withhold := func(provider, cycle string) (*taxv1.ComputeWithholdingResponse, error) {
		return s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
			ProviderId: provider, CycleId: cycle, Currency: "CNY", Gross: "1000.00", CommissionRate: "0.25",
			IdempotencyKey: "k-" + provider + "-" + cycle})
	}
	for _, p := range []string{"p-1", "p-2", "p-3"} {
		known(t, s, p, "individual", "CN", 1)
	}
	known(t, s, "p-9", "individual", "US", 1)
	if got, err := withhold("p-1", "cyc-20260101"); err != nil || got.RuleSet != "flat20" || got.TaxWithheld != "150.00" {
		t.Fatalf("p-1 before the selection: %v, %v", got, err)
	}
	resp, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "cn_labour"})
	if err != nil || !resp.GetEffectiveFrom().AsTime().Equal(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("selection: %v, %v; want in force from 2026-02-20", resp, err)
	}
	// Sent again an hour later (a client's retry), it keeps its day: it was
	// recorded again, in force from 01:00.
	clk.Advance(time.Hour)
	resp, err = s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "cn_labour"})
	if err != nil || !resp.GetEffectiveFrom().AsTime().Equal(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("selection sent again: %v, %v; want in force from 2026-02-20 still", resp, err)
	}
	// A selection made before selections had a day (-infinity since
	// migration tax/0006), selected again, is in force since always: it was
	// a 500 (a time.Time cannot hold -infinity).
	if _, err := s.d.Pool.Exec(context.Background(), `insert into tax.rule_selections (scope, rule_set, effective_from)
		values ('jurisdiction:CN-SH', 'cn_labour', '-infinity')`); err != nil {
		t.Fatal(err)
	}
	resp, err = s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN-SH", RuleSet: "cn_labour"})
	if err != nil || resp.GetEffectiveFrom() != nil {
		t.Fatalf("an old selection sent again: %v, %v; want in force since always (no effective_from)", resp, err)
	}
	if got, err := withhold("p-2", "cyc-20260101"); err != nil || got.RuleSet != "flat20" || got.TaxWithheld != "150.00" {
		t.Fatalf("p-2 of the cycle that ended before the selection: %v, %v; want flat20, 150.00 as p-1", got, err)
	}
	if got, err := withhold("p-3", "cyc-20260215"); err != nil || got.RuleSet != "cn_labour" || got.TaxWithheld != "0.00" {
		t.Fatalf("p-3 of the cycle ending after the selection: %v, %v; want cn_labour, 0.00", got, err)
	}
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{ProviderId: "p-9", RuleSet: "cn_labour"}); err != nil {
		t.Fatal(err)
	}
	if got, err := withhold("p-9", "cyc-20260215"); err != nil || got.RuleSet != "flat20" {
		t.Fatalf("cn_labour selected for a US provider: %v, %v; want the default, flat20 (refused, its settlement failed for good)", got, err)
	}
}

// A cycle closed early keeps the rule in force at its close for every
// provider: the rule was picked at the cycle's calendar end, so a selection
// made after the close applied to the providers settled after it (one held
// through the close and released later was withheld 0.00 under cn_labour,
// the others 150.00 under flat20). A caller that does not say when the
// cycle closed (settlement before the field) gets the rule at the cycle's
// end, as before; a close before the cycle's start is no close.
func TestRuleAsOfAnEarlyClose(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	const cycle = "cyc-20261112" // calendar end 2026-12-27
	closedAt := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for _, p := range []string{"p-1", "p-2", "p-3", "p-4", "p-5"} {
		known(t, s, p, "individual", "CN", 1)
	}
	withhold := func(provider string, closed *timestamppb.Timestamp) (*taxv1.ComputeWithholdingResponse, error) {
		return s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
			ProviderId: provider, CycleId: cycle, Currency: "CNY", Gross: "1000.00", CommissionRate: "0.25",
			IdempotencyKey: "k-" + provider, ClosedAt: closed})
	}
	clk.Set(closedAt.Add(time.Minute)) // the close settles p-1 (p-2 is held)
	if got, err := withhold("p-1", timestamppb.New(closedAt)); err != nil || got.RuleSet != "flat20" || got.TaxWithheld != "150.00" {
		t.Fatalf("p-1 at the close: %v, %v; want flat20, 150.00", got, err)
	}
	clk.Set(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "cn_labour"}); err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)) // p-2 released
	tests := []struct {
		give             string // provider
		closed           *timestamppb.Timestamp
		wantRule, wantTx string
	}{
		{"p-2", timestamppb.New(closedAt), "flat20", "150.00"},                                       // held through the early close
		{"p-3", nil, "cn_labour", "0.00"},                                                            // an older caller: the rule at the cycle's end
		{"p-4", timestamppb.New(time.Date(2026, 12, 28, 2, 0, 0, 0, time.UTC)), "cn_labour", "0.00"}, // closed when its calendar said
	}
	for _, tt := range tests {
		if got, err := withhold(tt.give, tt.closed); err != nil || got.RuleSet != tt.wantRule || got.TaxWithheld != tt.wantTx {
			t.Errorf("%s closed at %v: %v, %v; want %s, %s", tt.give, tt.closed.AsTime(), got, err, tt.wantRule, tt.wantTx)
		}
	}
	if _, err := withhold("p-5", timestamppb.New(time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC))); code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "closed_at") {
		t.Errorf("closed before the cycle started: %v, want InvalidArgument on closed_at", err)
	}
}

// Rules are effective-dated: no version is in force before 2026-01-01.
func TestRuleEffectiveDates(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	_, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
		ProviderId: "p-1", CycleId: "cyc-20251117", Currency: "CNY", Gross: "100.00", CommissionRate: "0.25", IdempotencyKey: "old",
		TaxProfile: "individual", Jurisdiction: "CN",
	})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "rule") {
		t.Fatalf("withholding before any rule: %v, want FailedPrecondition", err)
	}
	rules, err := s.api.ListTaxRules(as(auth.RoleFinance, ""), &taxv1.ListTaxRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The two rule sets of migration 0001, each version 1 from 2026-01-01, open-ended.
	want := map[string]string{"flat20": "", "cn_labour": "CN"} // rule set → jurisdiction
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if len(rules.TaxRules) != len(want) {
		t.Fatalf("rules = %v, want %v", rules.TaxRules, want)
	}
	for _, r := range rules.TaxRules {
		j, ok := want[r.RuleSet]
		if !ok || r.Jurisdiction != j || r.RuleVersion != "1" || !r.EffectiveFrom.AsTime().Equal(from) || r.EffectiveUntil != nil {
			t.Errorf("rule %v, want %s version 1 in %q from %s, open-ended", r, r.RuleSet, j, from)
		}
		delete(want, r.RuleSet)
	}
	// page_size and page_token page the list (both were ignored).
	first, err := s.api.ListTaxRules(as(auth.RoleFinance, ""), &taxv1.ListTaxRulesRequest{PageSize: 1})
	if err != nil || len(first.TaxRules) != 1 || first.NextPageToken == "" {
		t.Fatalf("a page of 1: %v, %v", first, err)
	}
	second, err := s.api.ListTaxRules(as(auth.RoleFinance, ""), &taxv1.ListTaxRulesRequest{PageSize: 1, PageToken: first.NextPageToken})
	if err != nil || len(second.TaxRules) != 1 || second.NextPageToken != "" || second.TaxRules[0].RuleSet == first.TaxRules[0].RuleSet {
		t.Fatalf("the page after %v: %v, %v", first.TaxRules, second, err)
	}
}

// Providers read their own withholdings and certificates, not others'.
func TestWithholdingsAndCertificate(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.20", "individual", "k1")
	list, err := s.api.ListTaxWithholdings(as(auth.RoleProvider, "p-1"), &taxv1.ListTaxWithholdingsRequest{ProviderId: "p-1"})
	if err != nil || len(list.TaxWithholdings) != 1 || list.TaxWithholdings[0].TaxWithheld != "160.00" {
		t.Fatalf("withholdings = %v, %v", list, err)
	}
	cert, err := s.api.GetWithholdingCertificate(as(auth.RoleProvider, "p-1"), &taxv1.GetWithholdingCertificateRequest{ProviderId: "p-1", CycleId: "cyc-20260101"})
	if err != nil || cert.Certificate.CertificateId == "" || cert.Certificate.RuleVersion != "1" {
		t.Fatalf("certificate = %v, %v", cert, err)
	}
	if _, err := s.api.ListTaxWithholdings(as(auth.RoleProvider, "p-2"), &taxv1.ListTaxWithholdingsRequest{ProviderId: "p-1"}); code(err) != codes.PermissionDenied {
		t.Fatalf("other provider: %v, want PermissionDenied", err)
	}
}

// A provider settled in two currencies in a cycle has a certificate each,
// reached by ?currency=; without it the call names the currencies (the CNY
// one was always answered, the USD one reachable by no call).
func TestCertificatePerCurrency(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	ids := map[string]string{}
	for _, cur := range []string{"CNY", "USD"} {
		resp, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
			ProviderId: "p-1", CycleId: "cyc-20260101", Currency: cur, Gross: "100.00", CommissionRate: "0.20",
			TaxProfile: "individual", Jurisdiction: "CN", IdempotencyKey: "k-" + cur,
		})
		if err != nil {
			t.Fatal(err)
		}
		ids[cur] = resp.CertificateId
	}
	get := func(cur string) (*taxv1.WithholdingCertificate, error) {
		resp, err := s.api.GetWithholdingCertificate(as(auth.RoleProvider, "p-1"),
			&taxv1.GetWithholdingCertificateRequest{ProviderId: "p-1", CycleId: "cyc-20260101", Currency: cur})
		return resp.GetCertificate(), err
	}
	for _, cur := range []string{"CNY", "USD", "usd"} {
		c, err := get(cur)
		if err != nil || c.Currency != strings.ToUpper(cur) || c.CertificateId != ids[strings.ToUpper(cur)] || c.CertificateId == "" {
			t.Errorf("certificate in %s: %v %v, want %s", cur, c, err, ids[strings.ToUpper(cur)])
		}
	}
	if _, err := get(""); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "CNY, USD") {
		t.Errorf("no currency named for two: %v, want InvalidArgument naming CNY, USD", err)
	}
	if _, err := get("EUR"); code(err) != codes.NotFound {
		t.Errorf("EUR: %v, want NotFound", err)
	}
	// As every listing's ?currency=: spaces around a code are the code, an
	// unknown one a 400 (both were a 404 naming no withholding).
	if c, err := get(" usd "); err != nil || c.Currency != "USD" {
		t.Errorf("\" usd \": %v, %v; want the USD certificate", c, err)
	}
	if _, err := get("XYZ"); code(err) != codes.InvalidArgument {
		t.Errorf("XYZ: %v, want InvalidArgument", err)
	}
}

// Paging walks every withholding once, in (cycle desc, currency) order, also
// when a page ends between two currencies of one cycle (a token holding the
// cycle alone skipped the cycle's other currencies).
func TestWithholdingPagesSplitACycle(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	var want []string
	for _, cycle := range []string{"cyc-20260215", "cyc-20260101"} {
		for _, cur := range []string{"CNY", "EUR", "USD"} {
			if _, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
				ProviderId: "p-1", CycleId: cycle, Currency: cur, Gross: "100.00", CommissionRate: "0.20",
				TaxProfile: "individual", Jurisdiction: "CN", IdempotencyKey: cycle + cur,
			}); err != nil {
				t.Fatal(err)
			}
			want = append(want, cycle+" "+cur)
		}
	}
	for _, size := range []int32{1, 2, 4} {
		var got []string
		token := ""
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("page size %d: more pages than withholdings", size)
			}
			resp, err := s.api.ListTaxWithholdings(as(auth.RoleProvider, "p-1"),
				&taxv1.ListTaxWithholdingsRequest{ProviderId: "p-1", PageSize: size, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range resp.TaxWithholdings {
				got = append(got, w.CycleId+" "+w.Currency)
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("page size %d: walked %v, want %v", size, got, want)
		}
	}
	// A token altered by the caller is a 400, not another position.
	first, err := s.api.ListTaxWithholdings(as(auth.RoleProvider, "p-1"), &taxv1.ListTaxWithholdingsRequest{ProviderId: "p-1", PageSize: 1})
	if err != nil || first.NextPageToken == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	bad := first.NextPageToken[:len(first.NextPageToken)-2] + "AA"
	if bad == first.NextPageToken {
		bad = first.NextPageToken[:len(first.NextPageToken)-2] + "BB"
	}
	if _, err := s.api.ListTaxWithholdings(as(auth.RoleProvider, "p-1"),
		&taxv1.ListTaxWithholdingsRequest{ProviderId: "p-1", PageToken: bad}); code(err) != codes.InvalidArgument {
		t.Fatalf("altered token: %v, want InvalidArgument", err)
	}
}

// Remittance: Dr tax:withheld:{j} / Cr bank:client per jurisdiction and
// currency, a report per provider, and re-running the month posts nothing new.
func TestRemitTax(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00
	compute(t, s, "p-2", "1000.00", "0.20", "individual", "k2") // 160.00
	if _, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-02"}); code(err) != codes.FailedPrecondition {
		t.Fatalf("remitting a month not ended: %v", err)
	}
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	resp, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-02"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Remittances) != 1 || resp.Remittances[0].Amount != "310.00" || resp.Remittances[0].Status != "remitted" || len(resp.Lines) != 2 {
		t.Fatalf("remittance = %v", resp)
	}
	if len(l.reqs) != 1 || l.reqs[0].Postings[0].Account != "tax:withheld:CN" || l.reqs[0].Postings[1].Account != "bank:client" || l.reqs[0].Postings[0].Amount != "310.00" {
		t.Fatalf("ledger = %v", l.reqs)
	}
	if _, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-02"}); err != nil || len(l.reqs) != 1 {
		t.Fatalf("second remittance posted again: %v, %d", err, len(l.reqs))
	}
}

// A withholding recorded in a month but committed after that month's
// remittance (its time is taken before its insert, which may wait in a
// shared batch) is remitted with the next month's, never attached to a
// remittance already planned: it was attached to the remitted one on a
// re-run, so the report counted it remitted while no ledger transaction
// ever paid it.
func TestRemitTaxLateWithholdingGoesToTheNextRemittance(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	remit := func(period string) *taxv1.RemitTaxResponse { t.Helper(); return remitted(t, s, period) }
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00 on 20 February
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	if feb := remit("2026-02"); len(feb.Remittances) != 1 || feb.Remittances[0].Amount != "150.00" || feb.Remittances[0].Status != "remitted" {
		t.Fatalf("February = %v", feb)
	}
	clk.Set(time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC))             // recorded on 27 February, committed after the remittance
	compute(t, s, "p-late", "1000.00", "0.20", "individual", "k-late") // 160.00
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	feb := remit("2026-02")
	if len(feb.Remittances) != 1 || feb.Remittances[0].Amount != "150.00" || len(feb.Lines) != 1 || feb.Lines[0].ProviderId != "p-1" || len(l.reqs) != 1 {
		t.Fatalf("February re-run = %v, ledger %d requests; want p-1's 150.00 alone, posted once", feb, len(l.reqs))
	}
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	mar := remit("2026-03")
	if len(mar.Remittances) != 1 || mar.Remittances[0].Amount != "160.00" || mar.Remittances[0].Status != "remitted" ||
		len(mar.Lines) != 1 || mar.Lines[0].ProviderId != "p-late" {
		t.Fatalf("March = %v, want p-late's 160.00 remitted", mar)
	}
	if len(l.reqs) != 2 || l.reqs[1].Postings[0].Amount != "160.00" {
		t.Fatalf("ledger = %v, want March's 160.00 posted", l.reqs)
	}
}

// A withholding is recorded before its settlement is posted, and a
// settlement the ledger refuses (or that still retries, or was reversed)
// puts nothing in tax:withheld: a remittance takes only withholdings whose
// settlement the ledger holds when it runs, counts the others, and takes
// them in the first run after the ledger posts them. A transaction under
// the key that credits another amount (another write took the key) is left
// out too. Every recorded withholding was remitted: the authority was paid
// from other clients' money for tax never withheld.
func TestRemitTaxOnlyWhatTheLedgerPosted(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	var log strings.Builder
	s.app.Log = slog.New(slog.NewTextHandler(&log, nil))
	remit := func(period string) *taxv1.RemitTaxResponse { t.Helper(); return remitted(t, s, period) }
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1")           // 150.00, posted
	late := record(t, s, "p-late", "1000.00", "0.20", "individual", "k2") // 160.00, refused until March
	record(t, s, "p-reversed", "1000.00", "0.20", "individual", "k3")     // 160.00, posted then reversed
	l.settle("k3", "CN", "CNY", "160.00")
	l.settled["k3"].ReversedBy = "tx-reversal"
	record(t, s, "p-odd", "1000.00", "0.20", "individual", "k4") // 160.00; its key holds another amount
	l.settle("k4", "CN", "CNY", "159.99")
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	feb := remit("2026-02")
	if len(feb.Remittances) != 1 || feb.Remittances[0].Amount != "150.00" || len(feb.Lines) != 1 || feb.Lines[0].ProviderId != "p-1" ||
		feb.WithholdingsNotPosted != 3 || len(l.reqs) != 1 || l.reqs[0].Postings[0].Amount != "150.00" {
		t.Fatalf("February = %v, ledger %v; want p-1's 150.00 alone, 3 not posted", feb, l.reqs)
	}
	l.settle("k2", late.Jurisdiction, late.Currency, late.TaxWithheld) // a release: the ledger posts it in March
	if feb = remit("2026-02"); feb.Remittances[0].Amount != "150.00" || len(l.reqs) != 1 || feb.WithholdingsNotPosted != 2 {
		t.Fatalf("February again = %v; want it unchanged, 2 not posted", feb)
	}
	// Found posted by a run that does not remit it (February's remittance
	// was made), reversed before the next: left out.
	clk.Set(time.Date(2026, 2, 27, 0, 0, 0, 0, time.UTC))
	record(t, s, "p-undone", "1000.00", "0.20", "individual", "k5") // 160.00
	l.settle("k5", "CN", "CNY", "160.00")
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	if feb = remit("2026-02"); feb.Remittances[0].Amount != "150.00" || len(l.reqs) != 1 || feb.WithholdingsNotPosted != 2 {
		t.Fatalf("February a third time = %v; want it unchanged, 2 not posted", feb)
	}
	l.settled["k5"].ReversedBy = "tx-reversal-5"
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	mar := remit("2026-03")
	if len(mar.Remittances) != 1 || mar.Remittances[0].Amount != "160.00" || len(mar.Lines) != 1 || mar.Lines[0].ProviderId != "p-late" ||
		mar.WithholdingsNotPosted != 3 || len(l.reqs) != 2 {
		t.Fatalf("March = %v; want p-late's 160.00 (recorded in February, posted since) alone, 3 not posted", mar)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "key=k4") || strings.Contains(log.String(), "key=k3") {
		t.Fatalf("log %q; want k4's other amount at ERROR, and nothing of k3", log.String())
	}
}

// Tax periods are Asia/Shanghai calendar months: at 02:00 Shanghai on
// 1 December (18:00 UTC on 30 November) November has ended and may be
// remitted, and a withholding recorded then belongs to December, not to
// November's remittance and report.
func TestRemitTaxShanghaiMonths(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	remit := func(period string) (*taxv1.RemitTaxResponse, error) {
		return s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: period})
	}
	clk.Set(time.Date(2026, 11, 30, 23, 59, 0, 0, shanghai))
	compute(t, s, "p-nov", "1000.00", "0.25", "individual", "k-nov") // 150.00 in November
	if _, err := remit("2026-11"); code(err) != codes.FailedPrecondition {
		t.Fatalf("remitting November at 23:59 on 30 Nov in Shanghai: %v", err)
	}
	decFirst := time.Date(2026, 12, 1, 2, 0, 0, 0, shanghai)
	if !decFirst.Equal(time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC)) {
		t.Fatalf("02:00 Shanghai on 1 Dec is %s UTC", decFirst.UTC())
	}
	clk.Set(decFirst)
	compute(t, s, "p-dec", "1000.00", "0.20", "individual", "k-dec") // 160.00 in December
	nov, err := remit("2026-11")
	if err != nil {
		t.Fatalf("remitting November at 02:00 on 1 Dec in Shanghai: %v", err)
	}
	if len(nov.Remittances) != 1 || nov.Remittances[0].Amount != "150.00" || len(nov.Lines) != 1 || nov.Lines[0].ProviderId != "p-nov" {
		t.Fatalf("November remittance = %v, want only p-nov's 150.00", nov)
	}
	if len(l.reqs) != 1 || l.reqs[0].Postings[0].Amount != "150.00" {
		t.Fatalf("ledger = %v", l.reqs)
	}

	clk.Set(time.Date(2026, 12, 31, 23, 59, 0, 0, shanghai))
	if _, err := remit("2026-12"); code(err) != codes.FailedPrecondition {
		t.Fatalf("remitting December before it ended in Shanghai: %v", err)
	}
	clk.Set(time.Date(2027, 1, 1, 0, 0, 0, 0, shanghai))
	dec, err := remit("2026-12")
	if err != nil {
		t.Fatal(err)
	}
	if len(dec.Remittances) != 1 || dec.Remittances[0].Amount != "160.00" || len(dec.Lines) != 1 || dec.Lines[0].ProviderId != "p-dec" {
		t.Fatalf("December remittance = %v, want p-dec's 160.00", dec)
	}
	if _, err := remit("2026-13"); code(err) != codes.InvalidArgument {
		t.Fatalf("period 2026-13: %v", err)
	}
}

// GPUBILL_TAX_TIMEZONE=UTC makes tax periods UTC months: at 18:00 UTC on
// 30 November, November has not ended.
func TestRemitTaxConfiguredZone(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	clk := clock.NewManual(time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC))
	l := &ledgerConn{}
	periods, err := taxperiod.New("UTC")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), svc.Deps{Pool: pool, Log: slog.New(slog.DiscardHandler), Clock: clk, Calendar: cycles.Default(),
		TaxPeriods: periods, Internal: l})
	if err != nil {
		t.Fatal(err)
	}
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00, recorded on 30 November (UTC)
	req := &taxv1.RemitTaxRequest{Period: "2026-11"}
	if _, err := s.api.RemitTax(as(auth.RoleFinance, ""), req); code(err) != codes.FailedPrecondition {
		t.Fatalf("remitting November at 18:00 UTC on 30 Nov with UTC periods: %v", err)
	}
	clk.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	resp, err := s.api.RemitTax(as(auth.RoleFinance, ""), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Remittances) != 1 || resp.Remittances[0].Amount != "150.00" || len(l.reqs) != 1 || l.reqs[0].Postings[0].Amount != "150.00" {
		t.Fatalf("November remitted %v with %d ledger postings, want 150.00 once", resp.Remittances, len(l.reqs))
	}
}

// A withholding asked for without a tax profile (settlement's: "the
// provider's") of a provider whose party.updated has not reached the tax
// service is refused with a FailedPrecondition naming the provider and
// records nothing; once the profile arrives, the same request is withheld by
// it. It was withheld as an individual in CN: an enterprise's tax recorded,
// posted and remitted to the wrong authority for good.
func TestWithholdingWaitsForTheProvidersProfile(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	request := func(profile, jurisdiction string) *taxv1.ComputeWithholdingRequest {
		return &taxv1.ComputeWithholdingRequest{ProviderId: "p-new", CycleId: "cyc-20260101", Currency: "CNY", Gross: "1000.00",
			CommissionRate: "0.20", TaxProfile: profile, Jurisdiction: jurisdiction, IdempotencyKey: "settle:cyc-20260101:p-new:CNY"}
	}
	for _, give := range []struct{ profile, jurisdiction string }{{"", ""}, {"individual", ""}, {"", "CN"}} {
		_, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), request(give.profile, give.jurisdiction))
		if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "p-new") || !strings.Contains(err.Error(), "tax profile") {
			t.Fatalf("profile %q, jurisdiction %q of a provider the tax service has not heard of: %v; want FailedPrecondition naming it",
				give.profile, give.jurisdiction, err)
		}
	}
	var n int
	if err := s.d.Pool.QueryRow(context.Background(), `select count(*) from tax.withholdings`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("withholdings recorded after the refusals: %d, %v; want none", n, err)
	}
	known(t, s, "p-new", "enterprise", "HK", 1)
	got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), request("", ""))
	if err != nil || got.TaxProfile != "enterprise" || got.Jurisdiction != "HK" || got.TaxWithheld != "0.00" || got.Net != "800.00" {
		t.Fatalf("once the profile arrived: %v, %v; want enterprise in HK, tax 0.00, net 800.00", got, err)
	}
}

// A remittance the ledger refuses does not hold back the others: one
// refused stopped the run, every later jurisdiction unremitted until a
// re-run by hand. The run fails naming it; a re-run posts it once taken.
func TestRemitTaxGoesOnPastARefusal(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	known(t, s, "p-2", "individual", "CN-BJ", 1)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // CN
	compute(t, s, "p-2", "1000.00", "0.20", "", "k2")           // CN-BJ
	l.mu.Lock()
	l.refuse = func(req *ledgerv1.CreateTransactionRequest) error {
		if req.Postings[0].Account == "tax:withheld:CN" {
			return status.Error(codes.InvalidArgument, "bank:client would go negative")
		}
		return nil
	}
	l.mu.Unlock()
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	_, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-02"})
	posted := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var out []string
		for _, r := range l.reqs {
			out = append(out, r.Postings[0].Account)
		}
		return out
	}
	if err == nil || len(posted()) != 1 || posted()[0] != "tax:withheld:CN-BJ" {
		t.Fatalf("a run with CN refused: %v, posted %v; want an error and CN-BJ posted", err, posted())
	}
	l.mu.Lock()
	l.refuse = nil
	l.mu.Unlock()
	if resp := remitted(t, s, "2026-02"); len(resp.Remittances) != 2 || len(posted()) != 2 || posted()[1] != "tax:withheld:CN" {
		t.Fatalf("the re-run: %v, posted %v; want CN posted once", resp, posted())
	}
}

// februaryRefused runs February's remittance on March 2nd with the ledger
// refusing it (err), then lets the ledger post again: February's
// remittance stays pending.
func februaryRefused(t *testing.T, s *Service, l *ledgerConn, clk *clock.Manual, err error) {
	t.Helper()
	l.mu.Lock()
	l.refuse = func(*ledgerv1.CreateTransactionRequest) error { return err }
	l.mu.Unlock()
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	if _, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-02"}); err == nil {
		t.Fatal("a run the ledger refused: want an error")
	}
	l.mu.Lock()
	l.refuse = nil
	l.mu.Unlock()
}

// A month's remittance the ledger refused is posted by the next month's run
// (the schedule runs only the month before): it stayed pending, its
// withholdings out of every later plan, until someone re-ran the month by
// hand.
func TestRemitTaxPostsAnEarlierMonthStillPending(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // CN, February
	februaryRefused(t, s, l, clk, status.Error(codes.Unavailable, "ledger down past the activity's limit"))
	compute(t, s, "p-2", "1000.00", "0.25", "individual", "k2") // CN, March
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	resp := remitted(t, s, "2026-03")
	var got []string
	for _, r := range resp.Remittances {
		got = append(got, r.GetRemittanceId()+" "+r.GetPeriod()+" "+r.GetStatus())
	}
	if len(got) != 2 || got[0] != "rem-2026-02-CN-CNY 2026-02 remitted" || got[1] != "rem-2026-03-CN-CNY 2026-03 remitted" {
		t.Fatalf("March's run answered %v; want February's pending remittance posted with March's", got)
	}
	l.mu.Lock()
	n := len(l.reqs)
	l.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d remittances posted, want 2 (February's once, March's)", n)
	}
}

// A run's lines are of the remittances it answers: per jurisdiction and
// currency they add up to them, each naming its remittance and period. A
// run posting an earlier month's remittance still pending answered its
// lines only for its own month (150.00 + 200.00 remitted, lines of
// 200.00): the breakdown of the 150.00 was in no answer.
func TestRemitTaxLinesAddUpToTheRemittances(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // CN, February: 150.00
	februaryRefused(t, s, l, clk, status.Error(codes.InvalidArgument, "bank:client would go negative"))
	compute(t, s, "p-2", "1250.00", "0.20", "individual", "k2") // CN, March: 20 % of 1000.00
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	resp := remitted(t, s, "2026-03")
	byRem, byLines := map[string]decimal.Decimal{}, map[string]decimal.Decimal{}
	periods := map[string]string{}
	for _, r := range resp.Remittances {
		k := r.Jurisdiction + " " + r.Currency
		byRem[k] = byRem[k].Add(decimal.RequireFromString(r.Amount))
		periods[r.RemittanceId] = r.Period
	}
	var got []string
	for _, ln := range resp.Lines {
		k := ln.Jurisdiction + " " + ln.Currency
		byLines[k] = byLines[k].Add(decimal.RequireFromString(ln.TaxWithheld))
		got = append(got, ln.RemittanceId+" "+ln.Period+" "+ln.ProviderId+" "+ln.TaxWithheld)
		if p, ok := periods[ln.RemittanceId]; !ok || p != ln.Period {
			t.Errorf("line %v names remittance %q of %q; the answer's remittances are %v", ln, ln.RemittanceId, ln.Period, periods)
		}
	}
	if len(byRem) != 1 || !byRem["CN CNY"].Equal(decimal.RequireFromString("350.00")) {
		t.Fatalf("remittances %v; want CN CNY 150.00 (February's, posted now) + 200.00", resp.Remittances)
	}
	for k, sum := range byRem {
		if !byLines[k].Equal(sum) {
			t.Errorf("%s: lines sum to %s, the remittances to %s", k, byLines[k], sum)
		}
	}
	want := []string{"rem-2026-02-CN-CNY 2026-02 p-1 150.00", "rem-2026-03-CN-CNY 2026-03 p-2 200.00"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// The remittance listing pages (it answered every remittance whatever
// page_size asked for, and no next_page_token), filters by period, refuses
// filters it cannot match, and a page token used with other filters.
func TestListRemittancesPages(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	known(t, s, "p-us", "individual", "US", 1)
	finance := as(auth.RoleFinance, "")
	for i, period := range []string{"2026-02", "2026-03", "2026-04"} {
		compute(t, s, "p-1", "1000.00", "0.25", "individual", "cn-"+period)
		if i == 0 {
			compute(t, s, "p-us", "1000.00", "0.25", "", "us-"+period)
		}
		p, err := s.app.TaxPeriods.Parse(period)
		if err != nil {
			t.Fatal(err)
		}
		clk.Set(p.End.Add(time.Hour))
		remitted(t, s, period)
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := s.api.ListRemittances(finance, &taxv1.ListRemittancesRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Remittances) > 2 || pages > 3 {
			t.Fatalf("page %d holds %d remittances, want at most 2", pages, len(resp.Remittances))
		}
		for _, r := range resp.Remittances {
			got = append(got, r.RemittanceId)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	want := "rem-2026-04-CN-CNY rem-2026-03-CN-CNY rem-2026-02-CN-CNY rem-2026-02-US-CNY"
	if strings.Join(got, " ") != want {
		t.Fatalf("pages listed %v, want %s", got, want)
	}
	resp, err := s.api.ListRemittances(finance, &taxv1.ListRemittancesRequest{Period: "2026-02", PageSize: 1})
	if err != nil || len(resp.Remittances) != 1 || resp.Remittances[0].RemittanceId != "rem-2026-02-CN-CNY" || resp.NextPageToken == "" {
		t.Fatalf("February's first page: %v, %v", resp, err)
	}
	other := &taxv1.ListRemittancesRequest{Period: "2026-03", PageSize: 1, PageToken: resp.NextPageToken}
	if _, err := s.api.ListRemittances(finance, other); code(err) != codes.InvalidArgument {
		t.Fatalf("February's page token with period 2026-03: %v, want InvalidArgument", err)
	}
	for _, bad := range []*taxv1.ListRemittancesRequest{{Period: "2026-13"}, {Period: "March"}, {Jurisdiction: "C%"},
		{Currency: "XYZ"}, {PageSize: -1}} {
		if _, err := s.api.ListRemittances(finance, bad); code(err) != codes.InvalidArgument {
			t.Errorf("ListRemittances(%v) = %v, want InvalidArgument", bad, err)
		}
	}
}

// A quote naming its provider applies the provider's own rule set
// selection, as the provider's settlement does: it applied the
// jurisdiction's, 150.00 of tax on a gross its statement then withheld
// 0.00 from.
func TestQuoteAppliesTheProvidersSelection(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t) // 2026-02-20
	known(t, s, "p-sel", "individual", "CN", 1)
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{ProviderId: "p-sel", RuleSet: "cn_labour"}); err != nil {
		t.Fatal(err)
	}
	quote := func(provider string) (*taxv1.QuoteWithholdingResponse, error) {
		return s.api.QuoteWithholding(as(auth.RoleAdmin, ""), &taxv1.QuoteWithholdingRequest{Currency: "CNY", Gross: "1000.00",
			CommissionRate: "0.25", TaxProfile: "individual", Jurisdiction: "CN", ProviderId: provider,
			UsageEnd: timestamppb.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))})
	}
	settled, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{ProviderId: "p-sel", CycleId: "cyc-20260215",
		Currency: "CNY", Gross: "1000.00", CommissionRate: "0.25", IdempotencyKey: "k-sel"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := quote("p-sel")
	if err != nil || got.RuleSet != settled.RuleSet || got.TaxWithheld != settled.TaxWithheld || got.TaxWithheld != "0.00" {
		t.Fatalf("p-sel's quote: %v, %v; its settlement withholds %s under %s", got, err, settled.TaxWithheld, settled.RuleSet)
	}
	if got, err := quote(""); err != nil || got.RuleSet != "flat20" || got.TaxWithheld != "150.00" {
		t.Fatalf("a quote of no provider: %v, %v; want CN's flat20, 150.00", got, err)
	}
	if _, err := quote("p-sel "); code(err) != codes.InvalidArgument {
		t.Fatalf("a provider id outside the grammar: %v, want InvalidArgument", err)
	}
}

// A quote naming a provider splits by the provider's own tax profile and
// jurisdiction on record (party.updated), as its settlement does: it took
// the request's, else individual in CN, and quoted an enterprise in CN
// 150.00 of tax on a gross its statement withheld 0.00 from, and a
// provider in HK by CN's rule set. With cn_labour selected for CN, each
// provider's quote is its settlement's split; the expected splits are
// worked by hand (gross 10000.00 at 25 %: base 7500.00; cn_labour:
// 7500 × 80 % × 20 % = 1200.00; flat20: 20 % = 1500.00; enterprises 0).
func TestQuoteAppliesTheProvidersProfile(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t) // 2026-02-20
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "cn_labour"}); err != nil {
		t.Fatal(err)
	}
	march := timestamppb.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) // usage of cyc-20260215
	quote := func(provider, profile, jurisdiction string) (*taxv1.QuoteWithholdingResponse, error) {
		return s.api.QuoteWithholding(as(auth.RoleAdmin, ""), &taxv1.QuoteWithholdingRequest{Currency: "CNY", Gross: "10000.00",
			CommissionRate: "0.25", TaxProfile: profile, Jurisdiction: jurisdiction, ProviderId: provider, UsageEnd: march})
	}
	tests := []struct {
		give, profile, jurisdiction string // provider and its record
		wantRule, wantTax, wantNet  string
	}{
		{"p-ent", "enterprise", "CN", "cn_labour", "0.00", "7500.00"},
		{"p-hk", "individual", "HK", "flat20", "1500.00", "6000.00"},
		{"p-hke", "enterprise", "HK", "flat20", "0.00", "7500.00"},
		{"p-ind", "individual", "CN", "cn_labour", "1200.00", "6300.00"},
	}
	for _, tt := range tests {
		known(t, s, tt.give, tt.profile, tt.jurisdiction, 1)
		settled, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{ProviderId: tt.give,
			CycleId: "cyc-20260215", Currency: "CNY", Gross: "10000.00", CommissionRate: "0.25", IdempotencyKey: "k-" + tt.give})
		if err != nil {
			t.Fatal(err)
		}
		if settled.RuleSet != tt.wantRule || settled.TaxWithheld != tt.wantTax || settled.Net != tt.wantNet {
			t.Errorf("%s's settlement: %s, tax %s, net %s; want %s, %s, %s", tt.give, settled.RuleSet, settled.TaxWithheld, settled.Net,
				tt.wantRule, tt.wantTax, tt.wantNet)
		}
		got, err := quote(tt.give, "", "")
		if err != nil || got.RuleSet != settled.RuleSet || got.Commission != settled.Commission || got.TaxWithheld != settled.TaxWithheld ||
			got.Net != settled.Net {
			t.Errorf("%s (%s in %s) quoted %v, %v; its settlement: %s, %s / %s / %s", tt.give, tt.profile, tt.jurisdiction, got, err,
				settled.RuleSet, settled.Commission, settled.TaxWithheld, settled.Net)
		}
		// Given as recorded (a jurisdiction in any case), the same.
		if got, err := quote(tt.give, tt.profile, strings.ToLower(tt.jurisdiction)); err != nil || got.TaxWithheld != settled.TaxWithheld {
			t.Errorf("%s quoted as recorded: %v, %v; want tax %s", tt.give, got, err, settled.TaxWithheld)
		}
	}
	// Given otherwise than recorded: refused naming the field, never a
	// split the provider's settlement would not make.
	for _, give := range []struct{ provider, profile, jurisdiction, field string }{
		{"p-ent", "individual", "", "tax_profile"},
		{"p-hk", "", "CN", "jurisdiction"},
		{"p-ent", "individual", "CN-BJ", "jurisdiction"},
	} {
		_, err := quote(give.provider, give.profile, give.jurisdiction)
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), give.field) || !strings.Contains(err.Error(), give.provider) {
			t.Errorf("%s quoted as %q in %q: %v; want InvalidArgument naming %s and the provider", give.provider, give.profile,
				give.jurisdiction, err, give.field)
		}
	}
	// A record from before metering checked the grammar is the provider's
	// to correct: not a 400 on a field the quote left out.
	known(t, s, "p-old", "individual", "C N", 1)
	if _, err := quote("p-old", "", ""); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "p-old") {
		t.Errorf("a provider recorded in %q: %v; want FailedPrecondition naming it", "C N", err)
	}
	// A provider the tax service has not heard of is quoted as before: by
	// the request's profile and jurisdiction, else individual in CN.
	if got, err := quote("p-none", "", ""); err != nil || got.RuleSet != "cn_labour" || got.TaxWithheld != "1200.00" {
		t.Errorf("an unknown provider's quote: %v, %v; want CN's cn_labour, 1200.00", got, err)
	}
	if got, err := quote("p-none", "individual", "HK"); err != nil || got.RuleSet != "flat20" || got.TaxWithheld != "1500.00" {
		t.Errorf("an unknown provider's quote in HK: %v, %v; want flat20, 1500.00", got, err)
	}
}

// Under cn_labour a provider or auditor recomputes the tax from the
// certificate: the rule on its taxable base (gross less the commission),
// rounded to the fen. The withholding settlement records, its certificate,
// the provider's listing and a quote of the same gross all state that tax.
// Taken on the exact commission and split by largest remainder, it was a
// fen off for the first five (640.02, 3600.05, 11440.05, 4120.01, 680.03).
// Expected values worked by hand from the rule.
func TestCNLabourCertificateRecomputesItsTax(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	clk.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) // the selection is made while cyc-20260101 runs
	if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{Jurisdiction: "CN", RuleSet: "cn_labour"}); err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC)) // the cycle settles
	tests := []struct {
		give                                       string // provider
		gross, rate                                string
		wantCommission, wantBase, wantTax, wantNet string
	}{
		{"p-a", "5000.11", "0.20", "1000.02", "4000.09", "640.01", "3360.08"},        // 4000.09 × 80 % × 20 % = 640.0144
		{"p-b", "30000.37", "0.25", "7500.09", "22500.28", "3600.04", "18900.24"},    // 18000.224 × 20 % = 3600.0448
		{"p-c", "70000.29", "0.20", "14000.06", "56000.23", "11440.06", "44560.17"},  // 44800.184 × 30 % − 2000 = 11440.0552
		{"p-d", "30000.02", "0.15", "4500.00", "25500.02", "4120.00", "21380.02"},    // 20400.016 × 30 % − 2000 = 4120.0048
		{"p-e", "5000.26", "0.15", "750.04", "4250.22", "680.04", "3570.18"},         // 3400.176 × 20 % = 680.0352
		{"p-f", "100000.29", "0.20", "20000.06", "80000.23", "18600.07", "61400.16"}, // 64000.184 × 40 % − 7000 = 18600.0736
	}
	for _, tt := range tests {
		got := compute(t, s, tt.give, tt.gross, tt.rate, "individual", "k-"+tt.give)
		if got.RuleSet != "cn_labour" || got.Commission != tt.wantCommission || got.TaxableBase != tt.wantBase ||
			got.TaxWithheld != tt.wantTax || got.Net != tt.wantNet {
			t.Errorf("%s %s at %s: withheld %s (rule %s) on base %s, commission %s, net %s; want %s on %s, %s, %s",
				tt.give, tt.gross, tt.rate, got.TaxWithheld, got.RuleSet, got.TaxableBase, got.Commission, got.Net,
				tt.wantTax, tt.wantBase, tt.wantCommission, tt.wantNet)
		}
		cert, err := s.api.GetWithholdingCertificate(as(auth.RoleProvider, tt.give), &taxv1.GetWithholdingCertificateRequest{ProviderId: tt.give, CycleId: "cyc-20260101"})
		if c := cert.GetCertificate(); err != nil || c.Gross != tt.gross || c.Commission != tt.wantCommission || c.TaxableBase != tt.wantBase || c.TaxWithheld != tt.wantTax {
			t.Errorf("%s's certificate: %v, %v; want gross %s, commission %s, base %s, tax %s", tt.give, c, err, tt.gross, tt.wantCommission, tt.wantBase, tt.wantTax)
		}
		list, err := s.api.ListTaxWithholdings(as(auth.RoleProvider, tt.give), &taxv1.ListTaxWithholdingsRequest{ProviderId: tt.give})
		if err != nil || len(list.TaxWithholdings) != 1 || list.TaxWithholdings[0].TaxWithheld != tt.wantTax || list.TaxWithholdings[0].TaxableBase != tt.wantBase {
			t.Errorf("%s's withholdings: %v, %v; want tax %s on %s", tt.give, list, err, tt.wantTax, tt.wantBase)
		}
		q, err := s.api.QuoteWithholding(as(auth.RoleAdmin, ""), &taxv1.QuoteWithholdingRequest{Currency: "CNY", Gross: tt.gross,
			CommissionRate: tt.rate, TaxProfile: "individual", Jurisdiction: "CN",
			UsageEnd: timestamppb.New(time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC))})
		if err != nil || q.RuleSet != "cn_labour" || q.Commission != tt.wantCommission || q.TaxWithheld != tt.wantTax || q.Net != tt.wantNet {
			t.Errorf("quote of %s at %s: %v, %v; want cn_labour, %s / %s / %s as settled", tt.gross, tt.rate, q, err, tt.wantCommission, tt.wantTax, tt.wantNet)
		}
	}
}

// A rule set selected for a country reaches its sub-jurisdictions (CN-BJ
// is CN's, as a rule's jurisdiction already was): the most specific
// selection in force wins, the provider's, then its jurisdiction's, then
// each jurisdiction it belongs to, then the default. cn_labour selected for
// CN withheld 0.00 from a provider in CN and 150.00 under flat20 from one
// in CN-BJ, and the rule listing for CN-BJ left cn_labour out.
func TestJurisdictionSelectionCoversSubJurisdictions(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t) // 2026-02-20
	known(t, s, "p-1", "individual", "CN", 1)
	known(t, s, "p-2", "individual", "CN-BJ", 1)
	known(t, s, "p-3", "individual", "CN-BJ", 1)
	selectFor := func(jurisdiction, provider, ruleSet string) {
		t.Helper()
		if _, err := s.api.SetRuleSelection(as(auth.RoleFinance, ""), &taxv1.SetRuleSelectionRequest{
			Jurisdiction: jurisdiction, ProviderId: provider, RuleSet: ruleSet}); err != nil {
			t.Fatal(err)
		}
	}
	withhold := func(provider, cycle string) *taxv1.ComputeWithholdingResponse {
		t.Helper()
		got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{
			ProviderId: provider, CycleId: cycle, Currency: "CNY", Gross: "1000.00", CommissionRate: "0.25",
			IdempotencyKey: "k-" + provider + "-" + cycle})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	quote := func(jurisdiction, provider string, usageEnd time.Time) *taxv1.QuoteWithholdingResponse {
		t.Helper()
		got, err := s.api.QuoteWithholding(as(auth.RoleAdmin, ""), &taxv1.QuoteWithholdingRequest{Currency: "CNY", Gross: "1000.00",
			CommissionRate: "0.25", TaxProfile: "individual", Jurisdiction: jurisdiction, ProviderId: provider,
			UsageEnd: timestamppb.New(usageEnd)})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	selectFor("CN", "", "cn_labour")
	for _, p := range []string{"p-1", "p-2"} {
		if got := withhold(p, "cyc-20260215"); got.RuleSet != "cn_labour" || got.TaxWithheld != "0.00" || got.Net != "750.00" {
			t.Errorf("%s in %s under CN's cn_labour: %s, tax %s, net %s; want cn_labour, 0.00, 750.00", p, got.Jurisdiction, got.RuleSet, got.TaxWithheld, got.Net)
		}
	}
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC) // usage of cyc-20260215
	if got := quote("CN-BJ", "", march); got.RuleSet != "cn_labour" || got.TaxWithheld != "0.00" {
		t.Errorf("a quote in CN-BJ: %v; want CN's cn_labour, 0.00", got)
	}
	rules := func(jurisdiction string) []string {
		t.Helper()
		resp, err := s.api.ListTaxRules(as(auth.RoleFinance, ""), &taxv1.ListTaxRulesRequest{Jurisdiction: jurisdiction})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range resp.TaxRules {
			out = append(out, r.RuleSet)
		}
		return out
	}
	if got := rules("CN-BJ"); strings.Join(got, " ") != "cn_labour flat20" {
		t.Errorf("rules of CN-BJ: %v; want cn_labour (CN's) and flat20", got)
	}
	if got := rules("US"); strings.Join(got, " ") != "flat20" {
		t.Errorf("rules of US: %v; want flat20 alone", got)
	}
	// A selection for CN-BJ beats CN's for CN-BJ's providers, from its day:
	// a cycle that ended before it keeps CN's.
	clk.Set(time.Date(2026, 4, 10, 0, 0, 0, 0, time.UTC))
	selectFor("CN-BJ", "", "flat20")
	if got := withhold("p-3", "cyc-20260401"); got.RuleSet != "flat20" || got.TaxWithheld != "150.00" {
		t.Errorf("p-3 in CN-BJ under CN-BJ's flat20: %s, tax %s; want flat20, 150.00", got.RuleSet, got.TaxWithheld)
	}
	if got := withhold("p-1", "cyc-20260401"); got.RuleSet != "cn_labour" || got.TaxWithheld != "0.00" {
		t.Errorf("p-1 in CN: %s, tax %s; want CN's cn_labour, 0.00", got.RuleSet, got.TaxWithheld)
	}
	if got := quote("CN-BJ", "", march); got.RuleSet != "cn_labour" {
		t.Errorf("a quote in CN-BJ of a cycle that ended before CN-BJ's selection: %v; want CN's cn_labour", got)
	}
	may := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if got := quote("CN-BJ", "", may); got.RuleSet != "flat20" || got.TaxWithheld != "150.00" {
		t.Errorf("a quote in CN-BJ after CN-BJ's selection: %v; want flat20, 150.00", got)
	}
	// The provider's own selection beats its jurisdiction's.
	selectFor("", "p-3", "cn_labour")
	if got := quote("CN-BJ", "p-3", may); got.RuleSet != "cn_labour" {
		t.Errorf("p-3's quote with its own selection: %v; want cn_labour", got)
	}
}

// A remittance whose ledger transaction was reversed is marked reversed
// (naming the reversal) and its withholdings are remitted again, under a
// new key: it read remitted, a run posted nothing, and the tax stayed in
// tax:withheld for good with no alert. The run that finds it re-plans its
// month: a re-run of the month, or the next month's run.
func TestRemitTaxReversedRemittanceIsPaidAgain(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00, CN, February
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	if feb := remitted(t, s, "2026-02"); len(feb.Remittances) != 1 || feb.Remittances[0].Status != "remitted" {
		t.Fatalf("February = %v", feb)
	}
	reverse := func(key, by string) { t.Helper(); l.reverseTx(t, key, by) }
	posted := l.postedKeys
	reverse("rem-2026-02-CN-CNY", "tx-reversal")
	clk.Set(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))
	again := remitted(t, s, "2026-02")
	want := []string{"rem-2026-02-CN-CNY debit tax:withheld:CN 150.00", "rem-2026-02-CN-CNY-2 debit tax:withheld:CN 150.00"}
	if got := posted(); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("posted %q; want February's 150.00 posted again under a new key: %q", got, want)
	}
	var got []string
	for _, r := range again.Remittances {
		got = append(got, r.RemittanceId+" "+r.Status+" "+r.Amount+" "+r.TransactionId+" "+r.ReversedBy)
	}
	wantRems := "rem-2026-02-CN-CNY reversed 150.00 tx-rem-2026-02-CN-CNY tx-reversal; rem-2026-02-CN-CNY-2 remitted 150.00 tx-rem-2026-02-CN-CNY-2 "
	if strings.Join(got, "; ") != wantRems || len(again.Lines) != 1 || again.Lines[0].RemittanceId != "rem-2026-02-CN-CNY-2" ||
		again.Lines[0].TaxWithheld != "150.00" {
		t.Fatalf("the re-run answered %q, lines %v; want %q and p-1's 150.00 in the new one", got, again.Lines, wantRems)
	}
	list, err := s.api.ListRemittances(as(auth.RoleFinance, ""), &taxv1.ListRemittancesRequest{Period: "2026-02"})
	if err != nil || len(list.Remittances) != 2 || list.Remittances[0].Status != "reversed" || list.Remittances[0].ReversedBy != "tx-reversal" ||
		list.Remittances[0].ReversedAt == nil || list.Remittances[1].Status != "remitted" {
		t.Fatalf("listing %v, %v; want the first reversed by tx-reversal, the second remitted", list, err)
	}
	if remitted(t, s, "2026-02"); len(posted()) != 2 {
		t.Fatalf("a third run posted %q; want nothing more", posted())
	}
	// Reversed again and found by March's run (the schedule runs the month
	// before only): February's withholdings are paid again as February's.
	reverse("rem-2026-02-CN-CNY-2", "tx-reversal-2")
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	mar := remitted(t, s, "2026-03")
	if got := posted(); len(got) != 3 || got[2] != "rem-2026-02-CN-CNY-3 debit tax:withheld:CN 150.00" {
		t.Fatalf("posted %q; want February's 150.00 posted a third time as rem-2026-02-CN-CNY-3", got)
	}
	if len(mar.Remittances) != 1 || mar.Remittances[0].RemittanceId != "rem-2026-02-CN-CNY-3" || mar.Remittances[0].Status != "remitted" {
		t.Fatalf("March's run answered %v; want February's new remittance, remitted", mar.Remittances)
	}
	var unremitted int
	if err := s.d.Pool.QueryRow(context.Background(), `select count(*) from tax.withholdings where remittance_id is null`).Scan(&unremitted); err != nil || unremitted != 0 {
		t.Fatalf("%v withholdings unremitted, %v; want none", unremitted, err)
	}
}

// reverseTx has the ledger reverse the transaction posted under key (by:
// the reversing transaction), as POST /v1/transactions/{id}:reverse does.
func (l *ledgerConn) reverseTx(t *testing.T, key, by string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	tx := l.settled[key]
	if tx == nil {
		t.Fatalf("nothing posted under %s", key)
	}
	tx.ReversedBy = by
}

// postedKeys lists the remittances posted to the ledger (a replay of a key
// included): key, direction, account and amount of the first leg.
func (l *ledgerConn) postedKeys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.reqs {
		out = append(out, r.IdempotencyKey+" "+r.Postings[0].Direction+" "+r.Postings[0].Account+" "+r.Postings[0].Amount)
	}
	return out
}

// A remittance reversed in the ledger is found by the service's periodic
// check, marked reversed and its tax remitted again, with no remittance
// run: only the next run (monthly, or POST /v1/tax-remittances) found it,
// and the tax sat in tax:withheld unpaid for up to a month.
func TestReversedRemittanceRemittedAgainWithoutARun(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00, CN, February
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	remitted(t, s, "2026-02")
	l.reverseTx(t, "rem-2026-02-CN-CNY", "tx-reversal")
	clk.Set(time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC))
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	want := "rem-2026-02-CN-CNY debit tax:withheld:CN 150.00; rem-2026-02-CN-CNY-2 debit tax:withheld:CN 150.00"
	testkit.Eventually(t, 5*time.Second, func() bool { return strings.Join(l.postedKeys(), "; ") == want },
		"no run: want February's 150.00 posted again as rem-2026-02-CN-CNY-2")
	list, err := s.api.ListRemittances(as(auth.RoleFinance, ""), &taxv1.ListRemittancesRequest{Period: "2026-02"})
	if err != nil || len(list.Remittances) != 2 || list.Remittances[0].Status != "reversed" || list.Remittances[0].ReversedBy != "tx-reversal" ||
		list.Remittances[1].Status != "remitted" || list.Remittances[1].Amount != "150.00" {
		t.Fatalf("listing %v, %v; want the first reversed by tx-reversal, the second remitted", list, err)
	}
	if got := l.postedKeys(); len(got) != 2 {
		t.Fatalf("posted %q; want nothing more", got)
	}
}

// The periodic check failing (the ledger unreachable) is counted: it was
// logged only, no reversal was found, and the reversed remittances' gauges
// stayed at 0 with nobody told. Not parallel: the counter is the
// process's, and a parallel test starts only once the sequential ones are
// done.
func TestReversalCheckFailuresCounted(t *testing.T) {
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00, CN, February
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	remitted(t, s, "2026-02") // the check looks its transaction up in the ledger
	l.mu.Lock()
	l.down = status.Error(codes.Unavailable, "the ledger is unreachable")
	l.mu.Unlock()
	before := testutil.ToFloat64(reversalCheckFailures)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	testkit.Eventually(t, 5*time.Second, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.failed > 0 },
		"the check never called the ledger")
	testkit.Eventually(t, 5*time.Second, func() bool { return testutil.ToFloat64(reversalCheckFailures) > before },
		"the check failed (the ledger unreachable): want gpubill_tax_reversal_check_failures_total risen")
}

// A remittance the ledger posted, whose answer the run lost (a timeout),
// reversed before the run's retry: the retry's post answers the reversed
// transaction (the key's), and it was recorded remitted, the tax unpaid
// until a later run. It is recorded reversed and its tax remitted again
// under a new key by the same run.
func TestRemittancePostedAndReversedBeforeItsRunRecordedIt(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00, CN, February
	l.mu.Lock()
	l.refuse = func(req *ledgerv1.CreateTransactionRequest) error {
		// Called under l.mu: posted, then reversed by finance; the
		// run never hears of either.
		l.settled[req.IdempotencyKey] = &ledgerv1.Transaction{TransactionId: "tx-" + req.IdempotencyKey,
			IdempotencyKey: req.IdempotencyKey, Postings: req.Postings, ReversedBy: "tx-reversal"}
		return status.Error(codes.DeadlineExceeded, "the answer was lost")
	}
	l.mu.Unlock()
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	if _, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-02"}); err == nil {
		t.Fatal("a run whose answer was lost: want an error")
	}
	l.mu.Lock()
	l.refuse = nil
	l.mu.Unlock()
	again := remitted(t, s, "2026-02")
	var got []string
	for _, r := range again.Remittances {
		got = append(got, r.RemittanceId+" "+r.Status+" "+r.Amount+" "+r.ReversedBy)
	}
	want := "rem-2026-02-CN-CNY reversed 150.00 tx-reversal; rem-2026-02-CN-CNY-2 remitted 150.00 "
	if strings.Join(got, "; ") != want {
		t.Fatalf("the retry answered %q; want %q", got, want)
	}
	if got := l.postedKeys(); len(got) != 2 || got[1] != "rem-2026-02-CN-CNY-2 debit tax:withheld:CN 150.00" {
		t.Fatalf("posted %q; want the replay, then rem-2026-02-CN-CNY-2", got)
	}
}

// The check and a run side by side after a reversal remit the reversed
// tax once: one new remittance (one key), whichever marks the reversal
// and plans it; the other finds it marked and planned.
func TestReversalCheckAndRunSideBySideRemitOnce(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00
	compute(t, s, "p-2", "1000.00", "0.20", "individual", "k2") // 160.00
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	remitted(t, s, "2026-02")
	l.reverseTx(t, "rem-2026-02-CN-CNY", "tx-reversal")
	clk.Set(time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC))
	const sideBySide = 4
	errs := make(chan error, 2*sideBySide)
	var wg sync.WaitGroup
	for range sideBySide {
		wg.Add(2)
		go func() { defer wg.Done(); _, err := s.app.RemitTax(context.Background(), "2026-02", 0); errs <- err }()
		go func() { defer wg.Done(); _, err := s.app.RemitReversed(context.Background()); errs <- err }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	keys := map[string]bool{}
	for _, p := range l.postedKeys() {
		keys[p] = true
	}
	if len(keys) != 2 || !keys["rem-2026-02-CN-CNY-2 debit tax:withheld:CN 310.00"] {
		t.Fatalf("posted %v; want February's 310.00 posted again under one new key", keys)
	}
	// Computed in SQL: what the remittances not reversed hold, and what is
	// remitted, each 310.00 once.
	var held, remits decimal.Decimal
	if err := s.d.Pool.QueryRow(context.Background(), `select
			(select coalesce(sum(w.tax_withheld), 0) from tax.withholdings w join tax.remittances r on r.remittance_id = w.remittance_id
				where r.status = 'remitted'),
			(select coalesce(sum(amount), 0) from tax.remittances where status = 'remitted')`).Scan(&held, &remits); err != nil {
		t.Fatal(err)
	}
	if want := decimal.RequireFromString("310.00"); !held.Equal(want) || !remits.Equal(want) {
		t.Fatalf("remitted remittances hold %s and amount to %s; want 310.00 each", held, remits)
	}
}
