package ledger_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Pricing rounds per lease cumulatively, so one lease's six 1-minute events
// at 0.30 CNY an hour (0.005 each) are charged 0.01, 0.00, 0.01, 0.00,
// 0.01, 0.00. The three charges billed at 0.00 move no money, yet their
// GPU-hours belong on the invoice and the provider's statement: the month's
// invoice showed 0.05 of the 0.1 GPU-hours (the rest of the money in a
// rounding line) and the statement half the hours. A redelivered message
// records nothing twice.
func TestChargesBilledAtZeroCountTheirHours(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 12, 9, 0, 0))
	f := newFixtureAt(t, nil, clk)
	ex := &fakeExplainer{}
	f.svc.Invoicing().Explainer = ex
	const renter, provider, cur, cycle = "r-zero", "p-zero", "CNY", "cyc-20260928"
	f.deposit(t, renter, "1.00", cur, "bank-zero")

	minute := decimal.NewFromInt(1).Div(decimal.NewFromInt(60)) // GPU-hours of one 1-minute event, as pricing renders them
	var msgs []app.ChargeMessage
	for i, amount := range []string{"0.01", "0.00", "0.01", "0.00", "0.01", "0.00"} {
		id := fmt.Sprintf("chg-zero-%d", i)
		msgs = append(msgs, app.ChargeMessage{ID: "b-" + id, Charges: []app.RatedCharge{{ChargeID: id, LeaseID: "lease-zero",
			RenterID: renter, ProviderID: provider, CycleID: cycle, Currency: cur, Amount: amount, EffectiveAt: clk.Now(),
			Lines: []app.ChargeLine{{Kind: "usage", GPUModel: "RTX_4090", GPUHours: minute.String()}}}}})
		ex.add(id, cur, amount, domain.ExplainedLine{Kind: "usage", GPUModel: "RTX_4090", GPUHours: minute, Amount: decimal.RequireFromString("0.005")})
	}
	for i, m := range msgs {
		if _, err := f.app.PostCharges(f.ctx, []app.ChargeMessage{m}); err != nil {
			t.Fatalf("post charge %d: %v", i, err)
		}
	}
	if n, err := f.app.PostCharges(f.ctx, msgs); err != nil || n != 0 { // redelivered
		t.Fatalf("redelivery: %d posted, %v; want nothing", n, err)
	}
	wantBalance(t, f, "renter:"+renter+":wallet", cur, "0.97")

	sixMinutes := minute.Mul(decimal.NewFromInt(6))
	ls, err := f.app.StatementLines(f.ctx, "provider:"+provider+":pending:"+cycle, cur, nil)
	if err != nil || len(ls) != 1 || ls[0].GPUHours == nil || !ls[0].GPUHours.Equal(sixMinutes) ||
		!ls[0].Amount.Equal(decimal.RequireFromString("0.03")) || ls[0].Postings != 3 {
		t.Fatalf("statement lines %+v, %v; want one of 0.03 over 3 postings, %s GPU-hours", ls, err, sixMinutes)
	}

	clk.Set(sh(11, 1, 1, 0, 0))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); err != nil || res.Issued != 1 {
		t.Fatalf("issue 2026-10: %+v, %v", res, err)
	}
	invs, _, err := f.svc.Invoicing().RenterInvoices(f.ctx, renter, cur, 10, "")
	if err != nil || len(invs) != 1 {
		t.Fatalf("invoices %+v, %v", invs, err)
	}
	var usage []string
	for _, l := range invs[0].Lines {
		if l.Kind == domain.InvoiceLineRounding {
			t.Errorf("rounding line %s: the lines should explain the charges", l.Amount)
			continue
		}
		usage = append(usage, l.Kind+" "+l.GPUHours.String()+" "+l.Amount.StringFixed(2))
	}
	if want := "usage " + sixMinutes.String() + " 0.03"; len(usage) != 1 || usage[0] != want || !invs[0].Charges.Equal(decimal.RequireFromString("0.03")) {
		t.Fatalf("invoice charges %s, lines %q; want one line %q", invs[0].Charges, usage, want)
	}
}

// A provider whose only charges in a cycle were billed at 0.00 (a free
// rate, a full discount, or pricing's cumulative rounding) has no balance
// there: nothing was posted. The cycle's balances, which settlement pages
// through at its close to know whom to settle, left it out, so its usage
// was on no statement at all. It is listed at 0.00, in its place among the
// others (pages of one walk both kinds in order), and in the cycle its
// charge went to: a 0.00 charge asking for a closed cycle is listed in the
// earliest open one.
func TestChargeBilledAtZeroAloneListsItsPendingAccount(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 12, 9, 0, 0))
	f := newFixtureAt(t, nil, clk)
	const cur, cycle, next = "CNY", "cyc-20260928", "cyc-20261112"
	f.deposit(t, "r-1", "1.00", cur, "bank-free")
	charge := func(id, provider, cycle, amount string) {
		t.Helper()
		m := app.ChargeMessage{ID: "b-" + id, Charges: []app.RatedCharge{{ChargeID: id, LeaseID: "lease-" + provider,
			RenterID: "r-1", ProviderID: provider, CycleID: cycle, Currency: cur, Amount: amount, EffectiveAt: clk.Now(),
			Lines: []app.ChargeLine{{Kind: "usage", GPUModel: "RTX_4090", GPUHours: "0.5"}}}}}
		if _, err := f.app.PostCharges(f.ctx, []app.ChargeMessage{m}); err != nil {
			t.Fatalf("post charge %s: %v", id, err)
		}
	}
	charge("chg-a", "p-a", cycle, "0.01")
	charge("chg-b1", "p-b", cycle, "0.00")
	charge("chg-b2", "p-b", cycle, "0.00")
	charge("chg-c", "p-c", cycle, "0.02")

	list := func(cycle string) []string {
		t.Helper()
		var got []string
		token := ""
		for range 10 {
			bs, nextToken, err := f.app.ListCycleBalances(f.ctx, cycle, 1, token)
			if err != nil {
				t.Fatalf("cycle balances of %s: %v", cycle, err)
			}
			for _, b := range bs {
				got = append(got, b.ProviderID+" "+b.Balance.Currency+" "+b.Balance.Amount.StringFixed(2))
			}
			if token = nextToken; token == "" {
				return got
			}
		}
		t.Fatalf("cycle balances of %s: more than 10 pages: %q", cycle, got)
		return nil
	}
	if got, want := list(cycle), []string{"p-a CNY 0.01", "p-b CNY 0.00", "p-c CNY 0.02"}; !slices.Equal(got, want) {
		t.Fatalf("cycle balances of %s: %q, want %q", cycle, got, want)
	}

	if _, err := f.app.CloseLedgerCycle(f.ctx, cycle); err != nil {
		t.Fatal(err)
	}
	charge("chg-d", "p-d", cycle, "0.00") // asks for the closed cycle: goes to the next
	if got, want := list(cycle), []string{"p-a CNY 0.01", "p-b CNY 0.00", "p-c CNY 0.02"}; !slices.Equal(got, want) {
		t.Fatalf("cycle balances of closed %s: %q, want %q", cycle, got, want)
	}
	if got, want := list(next), []string{"p-d CNY 0.00"}; !slices.Equal(got, want) {
		t.Fatalf("cycle balances of %s: %q, want %q", next, got, want)
	}
	ls, err := f.app.StatementLines(f.ctx, "provider:p-d:pending:"+next, cur, nil)
	if err != nil || len(ls) != 1 || ls[0].GPUHours == nil || !ls[0].GPUHours.Equal(dec("0.5")) || !ls[0].Amount.IsZero() {
		t.Fatalf("statement lines of p-d in %s: %+v, %v; want one of 0.5 GPU-hours for 0.00", next, ls, err)
	}
	checkInvariants(t, f)
}

// A renter whose month held only charges billed at 0.00 (and no deposit:
// a free tier) moved no money in it, and the month's run invoiced only the
// wallets with a posting in the month, so that usage was on no invoice. It
// gets an invoice of 0.00 whose line carries the GPU-hours; so does a
// renter that never had a posting at all.
func TestRenterChargedOnlyZeroInAMonthIsInvoiced(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(9, 20, 9, 0, 0))
	f := newFixtureAt(t, nil, clk)
	ex := &fakeExplainer{}
	f.svc.Invoicing().Explainer = ex
	const cur, cycle = "CNY", "cyc-20260928"
	f.deposit(t, "r-topped", "1.00", cur, "bank-topped") // in September: October has no posting of it
	clk.Set(sh(10, 12, 9, 0, 0))
	for _, renter := range []string{"r-topped", "r-never"} {
		id := "chg-free-" + renter
		m := app.ChargeMessage{ID: "b-" + id, Charges: []app.RatedCharge{{ChargeID: id, LeaseID: "lease-" + renter,
			RenterID: renter, ProviderID: "p-1", CycleID: cycle, Currency: cur, Amount: "0.00", EffectiveAt: clk.Now(),
			Lines: []app.ChargeLine{{Kind: "usage", GPUModel: "RTX_4090", GPUHours: "0.25"}}}}}
		ex.add(id, cur, "0.00", domain.ExplainedLine{Kind: "usage", GPUModel: "RTX_4090", GPUHours: dec("0.25"), Amount: dec("0.00")})
		if _, err := f.app.PostCharges(f.ctx, []app.ChargeMessage{m}); err != nil {
			t.Fatalf("post charge %s: %v", id, err)
		}
	}
	clk.Set(sh(11, 1, 1, 0, 0))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); err != nil || res.Issued != 2 {
		t.Fatalf("issue 2026-10: %+v, %v; want 2 issued (r-never, r-topped)", res, err)
	}
	for renter, balance := range map[string]string{"r-topped": "1.00", "r-never": "0.00"} {
		invs, _, err := f.svc.Invoicing().RenterInvoices(f.ctx, renter, cur, 10, "")
		if err != nil || len(invs) != 1 {
			t.Fatalf("%s's invoices %+v, %v; want one", renter, invs, err)
		}
		inv := invs[0]
		if !inv.Charges.IsZero() || inv.Closing.StringFixed(2) != balance || len(inv.Lines) != 1 ||
			inv.Lines[0].Kind != "usage" || !inv.Lines[0].GPUHours.Equal(dec("0.25")) || !inv.Lines[0].Amount.IsZero() {
			t.Errorf("%s's invoice: charges %s, closing %s, lines %+v; want 0.00, %s, one usage line of 0.25 GPU-hours for 0.00",
				renter, inv.Charges, inv.Closing, inv.Lines, balance)
		}
	}
}
