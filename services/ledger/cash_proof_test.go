package ledger_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// TestProofOfCashFindsABalanceNoLineExplains: the statement's one line
// matches the deposit, but the account closes at 110.00 against 100.00 in
// bank:client (it opens at 10.00: money the bank holds that no line and no
// ledger movement shows). Every item matched, the run said reconciled.
func TestProofOfCashFindsABalanceNoLineExplains(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	f.deposit(t, "r-1", "100.00", "CNY", "ref-1")
	chainAll(t, f)
	clk.Set(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-11-30,ref-1,100.00,110.00\n")
	runs, err := f.svc.Reconciliations().Run(f.ctx, "CNY", domain.ReconBySchedule, "service:settlement")
	if err != nil {
		t.Fatal(err)
	}
	r := runs[0]
	if r.Verdict != domain.ReconExceptions {
		t.Fatalf("run: %s (%s), statement closing %v, bank:client %s; want exceptions: 10.00 no item explains",
			r.Verdict, runSummary(r), r.BankClosing, r.LedgerBankClient)
	}
	kept, err := f.svc.Reconciliations().Get(f.ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if kept.CashDifferenceN != 1 || len(kept.Result.CashDifferences) != 1 || kept.MatchedCount != 1 {
		t.Fatalf("kept run: %d cash differences %+v, %s; want one", kept.CashDifferenceN, kept.Result.CashDifferences, runSummary(kept))
	}
	d := kept.Result.CashDifferences[0]
	if got := fmt.Sprintf("%s %s %s bank %s ledger %s +%s -%s = %s", d.StatementID, d.Account, d.ClosingAt.Format(time.RFC3339),
		d.Bank, d.Ledger, d.InBank, d.InLedger, d.Difference); got != "st-1 CN-CLIENT-1 2026-12-01T00:00:00Z bank 110 ledger 100 +0 -0 = 10" {
		t.Fatalf("cash difference: %s", got)
	}
	for _, s := range []string{"st-1", "110.00", "100.00", "10.00"} {
		if !strings.Contains(d.Reason, s) {
			t.Errorf("reason %q does not name %s", d.Reason, s)
		}
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 1 {
		t.Errorf("gpubill_reconciliation_exceptions %v; want 1", v)
	}
	if v := unmatchedGauge(t, f, "cash"); v != 1 {
		t.Errorf(`gpubill_reconciliation_unmatched{side="cash"} %v; want 1`, v)
	}

	// A run with no new statement proves cash at the latest close again:
	// the difference stays an exception until something explains it.
	clk.Advance(time.Hour)
	runs, err = f.svc.Reconciliations().Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil {
		t.Fatal(err)
	}
	if r := runs[0]; r.Verdict != domain.ReconExceptions || len(r.Result.CashDifferences) != 1 || !r.Result.CashDifferences[0].Difference.Equal(dec("10")) {
		t.Fatalf("run with no statement: %s, %+v; want the 10.00 again", r.Verdict, r.Result.CashDifferences)
	}
}

// TestProofOfCashHoldsAcrossTimingAndWriteOffs: what the ledger and the
// bank record on either side of a statement's close explains the
// difference between them, and a run whose items all match or are
// outstanding reconciles: a deposit the ledger records before the close
// that the bank books the next day (outstanding), one the bank books
// before the close that the ledger records after it (matched), a bank fee
// (unmatched, then written off: explained at every later close), and a
// run of the next day's statement.
func TestProofOfCashHoldsAcrossTimingAndWriteOffs(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "100.00", "CNY", "ref-1")
	f.deposit(t, "r-1", "20.00", "CNY", "ref-next-day")
	clk.Set(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	f.deposit(t, "r-1", "30.00", "CNY", "ref-early-bank") // the bank booked it on 11-30
	chainAll(t, f)
	clk.Set(time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-1130", "date,reference,amount,balance\n"+
		"2026-11-30,ref-1,100.00,100.00\n2026-11-30,ref-early-bank,30.00,130.00\n2026-11-30,FEE-11,-5.00,125.00\n")
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconBySchedule, "service:settlement")
	if err != nil {
		t.Fatal(err)
	}
	r1 := runs[0]
	if len(r1.Result.CashDifferences) != 0 || r1.UnmatchedBankN != 1 || r1.OutstandingN != 1 {
		t.Fatalf("run 1: cash differences %+v, %s; want none, the fee the one exception", r1.Result.CashDifferences, runSummary(r1))
	}
	if _, err := rec.ResolveItems(f.ctx, r1.ID, domain.ResolveWriteOff, "November account fee", "finance",
		[]domain.LineRef{{StatementID: "st-1130", LineNo: 3}}, nil); err != nil {
		t.Fatal(err)
	}

	clk.Set(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-1201", "date,reference,amount,balance\n2026-12-01,ref-next-day,20.00,145.00\n")
	runs, err = rec.Run(f.ctx, "CNY", domain.ReconBySchedule, "service:settlement")
	if err != nil {
		t.Fatal(err)
	}
	if r2 := runs[0]; r2.Verdict != domain.ReconReconciled || len(r2.Result.CashDifferences) != 0 {
		t.Fatalf("run 2: %s, cash differences %+v, %s; want reconciled", r2.Verdict, r2.Result.CashDifferences, runSummary(r2))
	}
	clk.Advance(time.Hour)
	runs, err = rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil {
		t.Fatal(err)
	}
	if r3 := runs[0]; r3.Verdict != domain.ReconReconciled || len(r3.Result.CashDifferences) != 0 {
		t.Fatalf("run 3 (no statement): %s, cash differences %+v; want reconciled", r3.Verdict, r3.Result.CashDifferences)
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 0 {
		t.Errorf("gpubill_reconciliation_exceptions %v; want 0", v)
	}
}

// TestProofOfCashClearsABalanceTheBankHeld: the account held 10.00 before
// gpubill went live (st-1 opens at 10.00). Finance records it in the ledger
// (bank:client 10.00 from the platform's account), a bank:client movement
// no line will ever show: unmatched, it is in transit, and written off it
// is in transit for good, so the 10.00 stayed a cash difference at every
// close and gpubill_reconciliation_exceptions fired for good. Resolved as
// bank_held (the bank holds its money without a line of its own) the entry
// is in the bank at every close: the runs reconcile, at st-1's close (before
// the entry) and at st-2's (after it). Voided, the difference is back.
func TestProofOfCashClearsABalanceTheBankHeld(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "100.00", "CNY", "ref-1")
	chainAll(t, f)
	clk.Set(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-11-30,ref-1,100.00,110.00\n")
	run := func(name, want string) *domain.ReconRun {
		t.Helper()
		clk.Advance(time.Minute)
		runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
		if err != nil {
			t.Fatal(err)
		}
		r := runs[0]
		var diffs, ledger []string
		for _, d := range r.Result.CashDifferences {
			diffs = append(diffs, fmt.Sprintf("%s bank %s ledger %s +%s -%s = %s", d.StatementID, d.Bank, d.Ledger, d.InBank, d.InLedger, d.Difference))
		}
		for _, u := range r.Result.UnmatchedLedger {
			ledger = append(ledger, u.Movement.Amount.String())
		}
		if got := fmt.Sprintf("%s cash %v ledger %v", r.Verdict, diffs, ledger); got != want {
			t.Fatalf("%s: %s, want %s", name, got, want)
		}
		return r
	}
	run("run 1", "exceptions cash [st-1 bank 110 ledger 100 +0 -0 = 10] ledger []")

	in := transfer("opening-balance-cny", domain.BankClient, domain.PlatformCommission, "10.00", "CNY")
	in.Description = "CN-CLIENT-1 held 10.00 before gpubill went live"
	entry, err := f.app.CreateTransaction(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	chainAll(t, f)
	r2 := run("run 2, the entry recorded", "exceptions cash [st-1 bank 110 ledger 100 +0 -0 = 10] ledger [10]")
	wo, err := rec.ResolveItems(f.ctx, r2.ID, domain.ResolveWriteOff, "opening balance", "finance", nil, []string{entry.ID})
	if err != nil {
		t.Fatal(err)
	}
	run("run 3, the entry written off", "exceptions cash [st-1 bank 110 ledger 100 +0 -0 = 10] ledger []")
	if _, err := rec.VoidResolution(f.ctx, r2.ID, wo.ID, "the bank holds it: not a write-off", "finance"); err != nil {
		t.Fatal(err)
	}
	r4 := run("run 4, the write-off voided", "exceptions cash [st-1 bank 110 ledger 100 +0 -0 = 10] ledger [10]")
	held, err := rec.ResolveItems(f.ctx, r4.ID, domain.ResolveBankHeld, "CN-CLIENT-1 held 10.00 before gpubill went live", "finance",
		nil, []string{entry.ID})
	if err != nil {
		t.Fatal(err)
	}
	run("run 5, the entry bank_held", "reconciled cash [] ledger []")
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 0 {
		t.Errorf("gpubill_reconciliation_exceptions %v; want 0", v)
	}

	// The next statement closes after the entry was recorded.
	f.deposit(t, "r-1", "5.00", "CNY", "ref-2")
	chainAll(t, f)
	clk.Set(time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-2", "date,reference,amount,balance\n2026-12-02,ref-2,5.00,115.00\n")
	run("run 6, st-2", "reconciled cash [] ledger []")
	if _, err := rec.VoidResolution(f.ctx, r4.ID, held.ID, "resolved against the wrong account", "finance"); err != nil {
		t.Fatal(err)
	}
	run("run 7, bank_held voided", "exceptions cash [st-2 bank 115 ledger 115 +0 -10 = 10] ledger [10]")
}

// unmatchedGauge reads gpubill_reconciliation_unmatched of CNY on a side.
func unmatchedGauge(t *testing.T, f *fixture, side string) float64 {
	t.Helper()
	for _, m := range ledger.Metrics() {
		if m.Name != "gpubill_reconciliation_unmatched" {
			continue
		}
		rows, err := f.pool.Query(f.ctx, m.Query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var cur, s string
			var v float64
			if err := rows.Scan(&cur, &s, &v); err != nil {
				t.Fatal(err)
			}
			if cur == "CNY" && s == side {
				return v
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("no gpubill_reconciliation_unmatched of CNY on side %s", side)
	}
	t.Fatal("no metric gpubill_reconciliation_unmatched")
	return 0
}
