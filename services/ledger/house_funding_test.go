package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A departed renter's debt: r-2 used 300.00 CNY it never paid, so the
// client money requirement (p-1's pending) is 300.00 more than bank:client
// holds. The house funds the shortfall from its own money and writes the
// debt off: the report is balanced and records no breach; the same funding
// without its kind is a breach; a write-off past the debit balance, or
// without a reason, is refused.
func TestDepartedRenterDebtFundedAndWrittenOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	closeRenter(t, f, "r-2")
	cyc := f.app.Calendar.At(time.Now()).ID
	if _, err := f.app.CreateTransaction(f.ctx, transfer("r2-usage", "renter:r-2:wallet", domain.ProviderPendingAddr("p-1", cyc), "300.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	// The house's own money (commission swept earlier), inside the house pool.
	if _, err := f.app.CreateTransaction(f.ctx, transfer("house-cash", "bank:operating", "platform:revenue:commission", "1000.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictShortfall || !rep.Difference.Equal(dec("-300")) {
		t.Fatalf("before: verdict %v difference %v (%v), want shortfall -300", rep.Verdict, rep.Difference, err)
	}

	funding := func(key, amount string, md map[string]string) app.CreateTransactionInput {
		in := transfer(key, "bank:client", "bank:operating", amount, "CNY")
		in.Metadata = md
		return in
	}
	writeOff := func(key, amount string) app.CreateTransactionInput {
		in := transfer(key, domain.PlatformBadDebt, "renter:r-2:wallet", amount, "CNY")
		in.Metadata = map[string]string{"kind": domain.KindBadDebtWriteOff, "reason": "r-2 offboarded owing 300.00"}
		return in
	}
	for _, tt := range []struct {
		name string
		give app.CreateTransactionInput
	}{
		{"funding without a reason", funding("fund-noreason", "300.00", map[string]string{"kind": domain.KindClientMoneyFunding})},
		{"funding the other way", func() app.CreateTransactionInput {
			in := transfer("fund-back", "bank:operating", "bank:client", "300.00", "CNY")
			in.Metadata = map[string]string{"kind": domain.KindClientMoneyFunding, "reason": "back"}
			return in
		}()},
		{"write-off past the debit balance", writeOff("wo-over", "300.01")},
		{"bad debt without a write-off", transfer("bd-manual", domain.PlatformBadDebt, "bank:operating", "1.00", "CNY")},
	} {
		var inv *apperr.InvalidError
		if _, err := f.app.CreateTransaction(f.ctx, tt.give); !errors.As(err, &inv) {
			t.Fatalf("%s: %v, want invalid", tt.name, err)
		}
	}
	wantBalance(t, f, "renter:r-2:wallet", "CNY", "-300.00")

	fund, err := f.app.CreateTransaction(f.ctx, funding("fund-r2", "300.00", map[string]string{"kind": domain.KindClientMoneyFunding, "reason": "r-2 offboarded owing 300.00"}))
	if err != nil {
		t.Fatal(err)
	}
	if fund.Kind != domain.TxClientMoneyFunding {
		t.Fatalf("funding posted as %q", fund.Kind)
	}
	// Funded, the shortfall is gone the same day, the debt not yet written
	// off; the house's money in is no commission unswept.
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictBalanced || rep.BreachesTotal != 0 || !rep.UnsweptCommission.IsZero() {
		t.Fatalf("funded: verdict %v breaches %d unswept commission %v (%v), want balanced, none, 0", rep.Verdict, rep.BreachesTotal, rep.UnsweptCommission, err)
	}
	if _, err := f.app.CreateTransaction(f.ctx, writeOff("wo-r2", "300.00")); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "renter:r-2:wallet", "CNY", "0")
	wantBalance(t, f, domain.PlatformBadDebt, "CNY", "300.00")
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictBalanced || !rep.Difference.IsZero() || rep.BreachesTotal != 0 || !rep.UnsweptCommission.IsZero() {
		t.Fatalf("after: verdict %v difference %v breaches %d unswept commission %v (%v), want balanced, none, 0",
			rep.Verdict, rep.Difference, rep.BreachesTotal, rep.UnsweptCommission, err)
	}

	// The same movement without the kind is the breach it always was.
	if _, err := f.app.CreateTransaction(f.ctx, funding("fund-plain", "1.00", nil)); err != nil {
		t.Fatal(err)
	}
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.BreachesTotal != 1 {
		t.Fatalf("a plain Dr bank:client / Cr bank:operating: %d breaches (%v), want 1", rep.BreachesTotal, err)
	}
}

// closeRenter records renter as closed in the ledger's read model, as its
// party.updated with status closed would: a write-off is of a closed
// renter's debt (TestWriteOffOfAnOpenRenterRefused).
func closeRenter(t *testing.T, f *fixture, renter string) {
	t.Helper()
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at)
		values ($1, 'CNY', 0, 1, now(), now() - interval '1 minute')`, renter); err != nil {
		t.Fatal(err)
	}
}

// Reversing finance's funding or write-off (a mistaken amount, the wrong
// renter) is the exact mirror of a sanctioned entry and no breach: it was
// recorded as one and paged (GpubillSegregationBreach). The report reads
// the reversals as it reads the entries: no commission left unswept. A
// manual entry of the mirrored shape, or naming the original's kind in its
// metadata, and the reversal of a plain (breaching) funding, stay breaches.
func TestReversedFundingAndWriteOffAreNoBreach(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	closeRenter(t, f, "r-3")
	cyc := f.app.Calendar.At(time.Now()).ID
	for _, in := range []app.CreateTransactionInput{
		transfer("r3-usage", "renter:r-3:wallet", domain.ProviderPendingAddr("p-1", cyc), "300.00", "CNY"),
		transfer("house-cash", "bank:operating", "platform:revenue:commission", "1000.00", "CNY"),
	} {
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	fundIn := transfer("fund-r3", "bank:client", "bank:operating", "300.00", "CNY")
	fundIn.Metadata = map[string]string{"kind": domain.KindClientMoneyFunding, "reason": "r-3 offboarded owing 300.00"}
	woIn := transfer("wo-r3", domain.PlatformBadDebt, "renter:r-3:wallet", "300.00", "CNY")
	woIn.Metadata = map[string]string{"kind": domain.KindBadDebtWriteOff, "reason": "r-3 offboarded owing 300.00"}
	var posted []*domain.Transaction
	for _, in := range []app.CreateTransactionInput{fundIn, woIn} {
		tx, err := f.app.CreateTransaction(f.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		posted = append(posted, tx)
	}
	// The write-off reversed: r-3 owes 300.00 again, the funding still
	// covers it.
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: posted[1].ID}); err != nil {
		t.Fatal(err)
	}
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if rep.BreachesTotal != 0 || rep.Verdict != app.VerdictBalanced || !rep.UnsweptCommission.IsZero() {
		t.Fatalf("write-off reversed: %d breaches, verdict %v unswept commission %v; want none, balanced, 0",
			rep.BreachesTotal, rep.Verdict, rep.UnsweptCommission)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: posted[0].ID}); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "renter:r-3:wallet", "CNY", "-300.00")
	wantBalance(t, f, domain.PlatformBadDebt, "CNY", "0")
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if rep.BreachesTotal != 0 || rep.Verdict != app.VerdictShortfall || !rep.Difference.Equal(dec("-300")) || !rep.UnsweptCommission.IsZero() {
		t.Fatalf("funding and write-off reversed: %d breaches, verdict %v difference %v unswept commission %v (%v); want none, shortfall -300, 0",
			rep.BreachesTotal, rep.Verdict, rep.Difference, rep.UnsweptCommission, err)
	}

	// Not a reversal of a sanctioned entry: each is one breach more.
	posing := transfer("posing", "bank:operating", "bank:client", "1.00", "CNY")
	posing.Metadata = map[string]string{"reverses_kind": domain.KindClientMoneyFunding, "reverses": posted[0].ID}
	plain, err := f.app.CreateTransaction(f.ctx, transfer("fund-plain", "bank:client", "bank:operating", "2.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.CreateTransaction(f.ctx, posing); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: plain.ID}); err != nil {
		t.Fatal(err)
	}
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if rep.BreachesTotal != 3 {
		t.Fatalf("a plain funding, its reversal and an entry posing as a funding's reversal: %d breaches (%v), want 3", rep.BreachesTotal, err)
	}
}
