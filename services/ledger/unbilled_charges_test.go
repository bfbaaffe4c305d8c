package ledger_test

import (
	"fmt"
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
