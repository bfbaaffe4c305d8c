package settlement

import (
	"context"
	"testing"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// A provider whose only charges in the cycle were billed at 0.00 (a free
// rate, a full discount, or pricing's cumulative rounding of small events)
// earned nothing in it, but its GPUs worked: the ledger lists its pending
// account at 0.00, and the close settled only positive balances, so that
// usage was on no statement, and the provider had none for the cycle. It
// gets a statement of 0.00 (commission, tax and net 0.00) whose lines
// carry the GPU-hours; nothing is withheld or posted (there is nothing to
// move: a posting of 0 is refused); the cycle settles.
func TestProviderChargedOnlyZeroGetsAZeroStatement(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.ledger.Charge("p-paid", cycle1.ID, "CNY", "100.00")
	f.ledger.Unbilled("p-free", cycle1.ID, "CNY", "1.5")
	f.ledger.Unbilled("p-free", cycle1.ID, "CNY", "1")
	runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true}, nil)

	if st := cycleStatus(t, f); st != domain.CycleSettled {
		t.Fatalf("cycle %s, want settled", st)
	}
	sts, err := f.s.store.ListStatements(context.Background(), "p-free", cycle1.ID, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 {
		t.Fatalf("p-free's statements of %s: %+v; want one, of 0.00 with its 2.5 GPU-hours", cycle1.ID, sts)
	}
	st := sts[0]
	sp := st.Split
	if sp.Currency != "CNY" || !sp.Gross.IsZero() || !sp.Commission.IsZero() || !sp.Tax.IsZero() || !sp.Net.IsZero() {
		t.Errorf("p-free's statement: %s gross %s, commission %s, tax %s, net %s; want CNY 0 each", sp.Currency, sp.Gross, sp.Commission, sp.Tax, sp.Net)
	}
	if len(st.Lines) != 1 || st.Lines[0].LeaseID != "lease-p-free" || st.Lines[0].GPUHours != "2.5" || st.Lines[0].Amount != "0.00" {
		t.Errorf("p-free's statement lines %+v; want lease-p-free's 2.5 GPU-hours for 0.00", st.Lines)
	}
	key := domain.SettlementKey(cycle1.ID, "p-free", "CNY")
	if n := f.ledger.Requests(key); n != 0 || st.TransactionID != "" {
		t.Errorf("p-free: %d ledger requests under %s, statement's transaction %q; want none (nothing to move)", n, key, st.TransactionID)
	}
	// No withholding: one no settlement posts would stay unremitted for good.
	if _, asked := f.tax.ClosedAt(key); asked || st.WithholdingID != "" {
		t.Errorf("p-free: tax service asked %v, statement's withholding %q; want neither (nothing to withhold)", asked, st.WithholdingID)
	}
	paid, err := f.s.store.ListStatements(context.Background(), "p-paid", cycle1.ID, nil, 10)
	if err != nil || len(paid) != 1 || paid[0].Split.Gross.String() != "100" || paid[0].TransactionID == "" {
		t.Fatalf("p-paid's statements %+v, %v; want one of 100.00, posted", paid, err)
	}
	if b := f.ledger.Balance(domain.PendingAccount("p-paid", cycle1.ID), "CNY"); !b.IsZero() {
		t.Errorf("p-paid's pending %s after the close, want 0", b)
	}
}
