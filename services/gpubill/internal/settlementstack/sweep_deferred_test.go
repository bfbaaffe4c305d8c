package settlementstack_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/settlement"
)

// The reviewer's case against the real ledger and tax service: r-a (on
// credit, no deposit) used 1000.00 on p-00000, r-b deposited 260.00 and used
// 100.00 on p-00001. Settled one after the other, p-00000's commission
// sweep (250.00) leaves bank:client at 10.00, which cannot fund p-00001's
// (25.00): the ledger refused p-00001's whole settlement for good, its net
// never reached available and the cycle stayed closing. Now p-00001
// settles with its sweep deferred; once a deposit lets bank:client fund it,
// the commission sweep job sweeps it, exactly once.
func TestSweepDeferredWhenClientMoneyCannotFundIt(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	// One provider at a time, in id order: p-00000's sweep lands first.
	r := newRealStack(t, tc, settlement.WithBatchSize(1), settlement.WithWindow(1))
	ctx := context.Background()
	r.charge(t, cycle1.ID, "r-a", "p-00000", "CNY", "1000.00")
	r.deposit(t, "r-b", "CNY", "260.00")
	r.charge(t, cycle1.ID, "r-b", "p-00001", "CNY", "100.00")
	if _, err := r.pool.Exec(ctx, `insert into settlement.providers (provider_id, tier) values ('p-00000', 'standard'), ('p-00001', 'standard')`); err != nil {
		t.Fatal(err)
	}
	taxProfiles(t, r.pool, "p-00000", "p-00001")
	r.tiers = map[string]string{"p-00000": "standard", "p-00001": "standard"}
	c0, _, net0 := wantSplit(t, dec("1000.00"), "standard")
	c1, _, net1 := wantSplit(t, dec("100.00"), "standard")
	if !net1.Equal(dec("60.00")) || !c1.Equal(dec("25.00")) || !c0.Equal(dec("250.00")) {
		t.Fatalf("splits: commission %s and %s, net %s; the case needs 250.00, 25.00 and 60.00", c0, c1, net1)
	}

	r.clock.Set(cycle1.End.Add(time.Hour))
	runWorker(t, r.s)
	if _, err := r.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	r.waitSettled(t, cycle1.ID, 60*time.Second)
	for p, net := range map[string]decimal.Decimal{"p-00000": net0, "p-00001": net1} {
		if b := r.balance(t, ids.ProviderPending(p, cycle1.ID), "CNY"); !b.IsZero() {
			t.Errorf("%s: pending %s after the close, want 0", p, b)
		}
		if b := r.balance(t, ids.ProviderAvailable(p), "CNY"); !b.Equal(net) {
			t.Errorf("%s: available %s, want net %s", p, b, net)
		}
	}
	if n := r.count(t, `select count(*) from settlement.settlements where provider_id = 'p-00001' and status = 'settled' and transaction_id <> ''`); n != 1 {
		t.Fatalf("p-00001 has %d statements, want 1", n)
	}
	// p-00000 swept in its settlement; p-00001's sweep deferred: its
	// commission is earned and still in bank:client, and counted.
	sweepKey := settlement.SettlementKey(cycle1.ID, "p-00001", "CNY") + ":sweep"
	wantBanks := func(operating, client decimal.Decimal) {
		t.Helper()
		if b := r.balance(t, "bank:operating", "CNY"); !b.Equal(operating) {
			t.Errorf("bank:operating %s, want %s", b, operating)
		}
		if b := r.balance(t, "bank:client", "CNY"); !b.Equal(client) {
			t.Errorf("bank:client %s, want %s", b, client)
		}
	}
	wantBanks(c0, dec("260.00").Sub(c0))
	if got := unswept(t, r); len(got) != 1 || !got["CNY"].Equal(c1) {
		t.Errorf("unswept commission %v, want CNY %s", got, c1)
	}
	// The auditors' report says why bank:client holds more than it owes.
	if m, ok := unsweptMemo(t, r); !ok || !m.Equal(c1) {
		t.Errorf("segregated-funds report: unswept commission memo %s (present %v), want %s", m, ok, c1)
	}
	if s := sweepCommission(t, r, tc); s.Swept != 0 || s.Deferred != 1 || s.Refused != 0 {
		t.Errorf("sweep before the deposit: %+v, want 1 still deferred (the ledger's bank:client refusal), none refused", s)
	}
	wantBanks(c0, dec("260.00").Sub(c0))

	// r-a pays its debt: bank:client can fund the sweep; it happens once.
	r.deposit(t, "r-a", "CNY", "1000.00")
	for i, want := range []int{1, 0} {
		if s := sweepCommission(t, r, tc); s.Swept != want || s.Deferred != 0 {
			t.Errorf("sweep run %d after the deposit: %+v, want %d swept", i+1, s, want)
		}
	}
	wantBanks(c0.Add(c1), dec("1260.00").Sub(c0).Sub(c1))
	resp, err := r.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: "bank:operating", PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var sweeps []*ledgerv1.Transaction
	for _, tx := range resp.Transactions {
		if tx.IdempotencyKey == sweepKey {
			sweeps = append(sweeps, tx)
		}
	}
	if len(resp.Transactions) != 2 || len(sweeps) != 1 || !legAmount(sweeps[0], "bank:client", "credit", "CNY").Equal(c1) {
		t.Fatalf("bank:operating moved by %d transactions, %d under %s; want p-00000's settlement and p-00001's sweep of %s", len(resp.Transactions), len(sweeps), sweepKey, c1)
	}
	if n := r.count(t, `select count(*) from settlement.settlements where provider_id = 'p-00001' and sweep_transaction_id = $1`, sweeps[0].TransactionId); n != 1 {
		t.Errorf("p-00001's statement does not name its sweep %s", sweeps[0].TransactionId)
	}
	if got := unswept(t, r); len(got) != 0 {
		t.Errorf("unswept commission %v after the sweep, want none", got)
	}
	if m, ok := unsweptMemo(t, r); ok {
		t.Errorf("segregated-funds report: unswept commission memo %s after the sweep, want none", m)
	}
}

// unsweptMemo reads the unswept commission memo line of the ledger's
// segregated-funds report of now in CNY, as an auditor's JSON shows it.
func unsweptMemo(t *testing.T, r *realStack) (decimal.Decimal, bool) {
	t.Helper()
	b, err := ledger.ExportSegregatedFunds(context.Background(), r.pool, nil, "CNY", "json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Lines []struct{ Section, Account, Amount string } `json:"lines"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, l := range rep.Lines {
		if l.Section == "memo" && l.Account == "commission earned - swept" {
			return dec(l.Amount), true
		}
	}
	return decimal.Zero, false
}

// sweepCommission runs the commission sweep workflow (as its hourly
// schedule does) and returns what it did.
func sweepCommission(t *testing.T, r *realStack, tc client.Client) settlement.SweepSummary {
	t.Helper()
	ctx := context.Background()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: helperQueue}, settlement.CommissionSweepWorkflowName)
	if err != nil {
		t.Fatal(err)
	}
	var s settlement.SweepSummary
	if err := run.Get(ctx, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// unswept reads gpubill_settlement_commission_unswept as /metrics would.
func unswept(t *testing.T, r *realStack) map[string]decimal.Decimal {
	t.Helper()
	for _, m := range settlement.Metrics() {
		if m.Name != "gpubill_settlement_commission_unswept" {
			continue
		}
		rows, err := r.pool.Query(context.Background(), m.Query)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]decimal.Decimal{}
		for rows.Next() {
			var cur string
			var v float64
			if err := rows.Scan(&cur, &v); err != nil {
				t.Fatal(err)
			}
			out[cur] = decimal.NewFromFloat(v).Round(2)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatal("no metric gpubill_settlement_commission_unswept")
	return nil
}
