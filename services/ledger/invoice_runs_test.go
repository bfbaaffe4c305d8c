package ledger_test

import (
	"math"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
)

// A month whose invoice run did not complete was told by nothing: after a
// restore onto a new Temporal the monthly run did not happen, and no metric
// or alert said December was never invoiced. The ledger records each month
// whose IssueMonth completed (a month where no wallet moved too: nothing to
// issue is done), and serves the start of the latest one and the time since
// the end of the oldest month, of those that ended (in the tax zone) since
// months are recorded (ledger.invoice_runs_from), with no completed run
// (GpubillInvoicesNotIssued). A run
// that fails for one wallet is not complete; issuing a month again issues
// nothing new.
func TestInvoicesUnissuedMonthAge(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 12, 9, 0, 0))
	f := newFixtureAt(t, nil, clk)
	ex := &fakeExplainer{}
	f.svc.Invoicing().Explainer = ex
	const r1, cur = "r-run1", "CNY"
	// The gauges read the database's clock (the machine's): November must
	// have ended there for the check to prove anything.
	novEnd := sh(12, 1, 0, 0, 0)
	if time.Now().Before(novEnd.Add(time.Hour)) {
		t.Fatalf("the machine's clock is %s, before November's end in Shanghai (%s): the age check proves nothing", time.Now(), novEnd)
	}
	// Months are recorded from the migration (now): none has ended since.
	if got := invoiceGauges(t, f); len(got) != 2 || got["gpubill_invoices_unissued_age_seconds"] != 0 || got["gpubill_invoices_last_issued_period_timestamp_seconds"] != 0 {
		t.Fatalf("gauges before any run: %v; want both 0", got)
	}
	// As though upgraded on 10 September: September, October and November
	// have ended since.
	recordFrom(t, f, sh(9, 10, 0, 0, 0))

	// September, when no wallet moved: nothing to issue, and the run is
	// complete. October and November, not run, have ended.
	clk.Set(sh(10, 12, 9, 0, 0))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-09"); err != nil || res.Issued != 0 {
		t.Fatalf("issue 2026-09: %+v, %v; want nothing to issue", res, err)
	}
	octEnd := sh(11, 1, 0, 0, 0)
	got := invoiceGauges(t, f)
	if w := time.Since(octEnd).Seconds(); math.Abs(got["gpubill_invoices_unissued_age_seconds"]-w) > 60 {
		t.Errorf("unissued age %v with 2026-10 and 2026-11 not run; want %v (since %s)", got["gpubill_invoices_unissued_age_seconds"], w, octEnd)
	}
	if w := float64(sh(9, 1, 0, 0, 0).Unix()); got["gpubill_invoices_last_issued_period_timestamp_seconds"] != w {
		t.Errorf("last issued period %v; want %v (2026-09)", got["gpubill_invoices_last_issued_period_timestamp_seconds"], w)
	}

	postCharge(t, f, "chg-run-oct", r1, "p-1", cur, "3.00", clk.Now())
	ex.add("chg-run-oct", cur, "3.00", line("usage", "RTX_4090", "", "", "1", "3.00", "0"))
	clk.Set(sh(11, 1, 1, 0, 0))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); err != nil || res.Issued != 1 {
		t.Fatalf("issue 2026-10: %+v, %v; want 1 issued", res, err)
	}
	// Again (a backfilled run after a restore): nothing new.
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); err != nil || res.Issued != 0 || res.AlreadyIssued != 0 {
		t.Fatalf("issue 2026-10 again: %+v, %v; want nothing", res, err)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.invoices where period = '2026-10'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("invoices of 2026-10: %d, %v; want 1", n, err)
	}

	// November: a charge pricing does not know fails the run.
	clk.Set(sh(11, 20, 9, 0, 0))
	postCharge(t, f, "chg-run-nov", r1, "p-1", cur, "4.00", clk.Now())
	clk.Set(sh(12, 1, 1, 0, 0))
	if _, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-11"); err == nil {
		t.Fatal("2026-11 issued with a charge pricing does not know")
	}
	got = invoiceGauges(t, f)
	wantAge := time.Since(novEnd).Seconds()
	if math.Abs(got["gpubill_invoices_unissued_age_seconds"]-wantAge) > 60 {
		t.Errorf("unissued age %v with 2026-11 not issued; want %v (since %s)", got["gpubill_invoices_unissued_age_seconds"], wantAge, novEnd)
	}
	if w := float64(sh(10, 1, 0, 0, 0).Unix()); got["gpubill_invoices_last_issued_period_timestamp_seconds"] != w {
		t.Errorf("last issued period %v; want %v (2026-10)", got["gpubill_invoices_last_issued_period_timestamp_seconds"], w)
	}

	ex.add("chg-run-nov", cur, "4.00", line("usage", "RTX_4090", "", "", "1", "4.00", "0"))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-11"); err != nil || res.Issued != 1 {
		t.Fatalf("issue 2026-11: %+v, %v; want 1 issued", res, err)
	}
	// December, if it has ended on the machine's clock, is the oldest month
	// not issued now.
	decEnd := time.Date(2027, 1, 1, 0, 0, 0, 0, shanghai)
	wantAge = 0
	if time.Now().After(decEnd) {
		wantAge = time.Since(decEnd).Seconds()
	}
	got = invoiceGauges(t, f)
	if math.Abs(got["gpubill_invoices_unissued_age_seconds"]-wantAge) > 60 {
		t.Errorf("unissued age %v with 2026-11 issued; want %v", got["gpubill_invoices_unissued_age_seconds"], wantAge)
	}
	if w := float64(sh(11, 1, 0, 0, 0).Unix()); got["gpubill_invoices_last_issued_period_timestamp_seconds"] != w {
		t.Errorf("last issued period %v; want %v (2026-11)", got["gpubill_invoices_last_issued_period_timestamp_seconds"], w)
	}
}

// A fresh install's first monthly run never happening is told: months are
// recorded from its migration, so the first month that ends after it with
// no run is unissued. With no run recorded the age read 0 for ever.
func TestInvoicesUnissuedFromAFreshInstall(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(12, 7, 9, 0, 0))
	f := newFixtureAt(t, nil, clk)
	sepEnd, octEnd := sh(10, 1, 0, 0, 0), sh(11, 1, 0, 0, 0)
	if time.Now().Before(octEnd.Add(time.Hour)) {
		t.Fatalf("the machine's clock is %s, before October's end in Shanghai (%s): the age check proves nothing", time.Now(), octEnd)
	}
	var from time.Time
	if err := f.pool.QueryRow(f.ctx, `select recorded_from from ledger.invoice_runs_from`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(from); d < 0 || d > time.Minute {
		t.Fatalf("months recorded from %s; want the migration's time (now, %s)", from, time.Now())
	}
	wantInvoiceAge(t, f, time.Now().Add(time.Hour), "no month has ended since the install")

	// As though installed on 10 September, no monthly run since.
	recordFrom(t, f, sh(9, 10, 0, 0, 0))
	wantInvoiceAge(t, f, sepEnd, "installed on 10 September, no run since")
	clk.Set(sh(12, 7, 9, 0, 0))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-09"); err != nil || res.Issued != 0 {
		t.Fatalf("issue 2026-09: %+v, %v; want nothing to issue", res, err)
	}
	wantInvoiceAge(t, f, octEnd, "September issued, October and November not run")
}

// Finance issuing an old month again by hand changes nothing: months are
// recorded from the upgrade whatever month is run. The re-run month became
// the first recorded one, and every month since it with no record (all
// those before the upgrade) read unissued.
func TestInvoicesUnissuedOldMonthRunAgainByHand(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 1, 1, 0, 0))
	f := newFixtureAt(t, nil, clk)
	novEnd := sh(12, 1, 0, 0, 0)
	if time.Now().Before(novEnd.Add(time.Hour)) {
		t.Fatalf("the machine's clock is %s, before November's end in Shanghai (%s): the age check proves nothing", time.Now(), novEnd)
	}
	// Upgraded on 10 September; September to November issued by their
	// monthly runs (no wallet moved).
	recordFrom(t, f, sh(9, 10, 0, 0, 0))
	for _, p := range []struct {
		period string
		at     time.Time
	}{{"2026-09", sh(10, 1, 1, 0, 0)}, {"2026-10", sh(11, 1, 1, 0, 0)}, {"2026-11", sh(12, 1, 1, 0, 0)}} {
		clk.Set(p.at)
		if _, err := f.svc.Invoicing().IssueMonth(f.ctx, p.period); err != nil {
			t.Fatalf("issue %s: %v", p.period, err)
		}
	}
	decEnd := time.Date(2027, 1, 1, 0, 0, 0, 0, shanghai)
	wantInvoiceAge(t, f, decEnd, "every month to November issued")

	// Finance issues March 2025 again.
	clk.Set(sh(12, 7, 10, 0, 0))
	if _, err := f.svc.Invoicing().IssueMonth(f.ctx, "2025-03"); err != nil {
		t.Fatalf("issue 2025-03: %v", err)
	}
	wantInvoiceAge(t, f, decEnd, "2025-03 issued again by hand")
	if got, w := invoiceGauges(t, f)["gpubill_invoices_last_issued_period_timestamp_seconds"], float64(sh(11, 1, 0, 0, 0).Unix()); got != w {
		t.Errorf("last issued period %v; want %v (2026-11)", got, w)
	}
}

// An upgrade whose latest invoiced month is older than last month (no
// wallet moved since) tickets for no month: the months after it ended
// before the upgrade. They read unissued at once.
func TestInvoicesUnissuedUpgradeAfterQuietMonths(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(9, 10, 9, 0, 0))
	f := newFixtureAt(t, nil, clk)
	ex := &fakeExplainer{}
	f.svc.Invoicing().Explainer = ex
	octEnd := sh(11, 1, 0, 0, 0)
	if time.Now().Before(octEnd.Add(time.Hour)) {
		t.Fatalf("the machine's clock is %s, before October's end in Shanghai (%s): the age check proves nothing", time.Now(), octEnd)
	}
	// September invoiced, the latest month: 0026 seeds it at the upgrade
	// (now), as its run records it here. No wallet moved in October or
	// November.
	postCharge(t, f, "chg-quiet-sep", "r-quiet", "p-1", "CNY", "3.00", clk.Now())
	ex.add("chg-quiet-sep", "CNY", "3.00", line("usage", "RTX_4090", "", "", "1", "3.00", "0"))
	clk.Set(sh(10, 1, 1, 0, 0))
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-09"); err != nil || res.Issued != 1 {
		t.Fatalf("issue 2026-09: %+v, %v; want 1 issued", res, err)
	}
	wantInvoiceAge(t, f, time.Now().Add(time.Hour), "no month has ended since the upgrade")
	if got, w := invoiceGauges(t, f)["gpubill_invoices_last_issued_period_timestamp_seconds"], float64(sh(9, 1, 0, 0, 0).Unix()); got != w {
		t.Errorf("last issued period %v; want %v (2026-09)", got, w)
	}
}

// recordFrom sets when months began to be recorded, as though the ledger
// was upgraded (or installed) then.
func recordFrom(t *testing.T, f *fixture, from time.Time) {
	t.Helper()
	if _, err := f.pool.Exec(f.ctx, `update ledger.invoice_runs_from set recorded_from = $1`, from); err != nil {
		t.Fatal(err)
	}
}

// wantInvoiceAge checks the unissued age is the time since the end of the
// month that ended at since (0 if since is still ahead on the database's
// clock, the machine's).
func wantInvoiceAge(t *testing.T, f *fixture, since time.Time, why string) {
	t.Helper()
	want := 0.0
	if time.Now().After(since) {
		want = time.Since(since).Seconds()
	}
	if got := invoiceGauges(t, f)["gpubill_invoices_unissued_age_seconds"]; math.Abs(got-want) > 60 {
		t.Errorf("unissued age %v; want %v (%s)", got, want, why)
	}
}

// invoiceGauges reads the invoice gauges the service serves, as a scrape
// does.
func invoiceGauges(t *testing.T, f *fixture) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range f.svc.Metrics() {
		if m.Name != "gpubill_invoices_unissued_age_seconds" && m.Name != "gpubill_invoices_last_issued_period_timestamp_seconds" {
			continue
		}
		var v float64
		if err := f.pool.QueryRow(f.ctx, m.Query).Scan(&v); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		out[m.Name] = v
	}
	return out
}
