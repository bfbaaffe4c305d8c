package tax

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// A month whose remittance run never happened (Temporal lost over the 1st,
// the schedule paused, the run failing) was told only by
// GpubillTaxNotRemitted, at 33 days of a withholding's age: for one
// withheld on the 28th, after the 15th's filing deadline; for a month
// whose withholdings all waited on an unposted settlement, never. The tax
// service records each month whose RemitTax completed (a month where
// nothing was owed too), and serves the time since the end of the oldest
// month (in the tax zone) that has ended since months are recorded (the
// migration) with no completed run (GpubillTaxMonthNotRemitted), and the
// start of the latest month remitted. A run the ledger refuses is not
// complete; a month run again keeps its first record.
func TestTaxUnremittedMonthAge(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	ctx := context.Background()
	shanghai := taxperiod.Default().Location()
	sh := func(m time.Month, d, h int) time.Time { return time.Date(2026, m, d, h, 0, 0, 0, shanghai) }
	const ageName, lastName = "gpubill_tax_unremitted_month_age_seconds", "gpubill_tax_last_remitted_period_timestamp_seconds"
	gauge := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, s.d.Pool, s.Metrics(), name) }
	// The gauges read the database's clock (the machine's): November must
	// have ended there for the check to prove anything.
	novEnd := sh(12, 1, 0)
	if time.Now().Before(novEnd.Add(time.Hour)) {
		t.Fatalf("the machine's clock is %s, before November's end in Shanghai (%s): the age check proves nothing", time.Now(), novEnd)
	}
	wantAge := func(since time.Time, why string) {
		t.Helper()
		want := 0.0
		if time.Now().After(since) {
			want = time.Since(since).Seconds()
		}
		if got := gauge(ageName); math.Abs(got-want) > 60 {
			t.Errorf("%s: %v; want %v (%s)", ageName, got, want, why)
		}
	}
	wantLast := func(start time.Time) {
		t.Helper()
		if got := gauge(lastName); got != float64(start.Unix()) {
			t.Errorf("%s: %v; want %v (%s)", lastName, got, start.Unix(), start)
		}
	}
	// Months are recorded from the migration (now): none has ended since,
	// and the upgrade alarms for no month before it.
	wantAge(time.Now().Add(time.Hour), "no month ended since the migration")
	if got := gauge(lastName); got != 0 {
		t.Errorf("%s before any run: %v; want 0", lastName, got)
	}

	// As though upgraded on 10 September: September, October and November
	// have ended since, none run.
	if _, err := s.d.Pool.Exec(ctx, `update tax.remittance_runs_from set recorded_from = $1`, sh(9, 10, 0)); err != nil {
		t.Fatal(err)
	}
	sepEnd := sh(10, 1, 0)
	wantAge(sepEnd, "September, October and November not run")

	// September, when nothing was owed: its run completes with nothing
	// remitted.
	clk.Set(sh(10, 1, 2))
	if resp := remitted(t, s, "2026-09"); len(resp.Remittances) != 0 {
		t.Fatalf("September: %v; want nothing to remit", resp)
	}
	octEnd := sh(11, 1, 0)
	wantAge(octEnd, "September remitted, October not run")
	wantLast(sh(9, 1, 0))

	// October: the ledger refuses its remittance; the run is not complete.
	clk.Set(sh(10, 20, 9))
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k-oct") // 150.00
	l.mu.Lock()
	l.refuse = func(*ledgerv1.CreateTransactionRequest) error { return status.Error(codes.Unavailable, "ledger down") }
	l.mu.Unlock()
	clk.Set(sh(11, 1, 2))
	if _, err := s.api.RemitTax(as(auth.RoleFinance, ""), &taxv1.RemitTaxRequest{Period: "2026-10"}); err == nil {
		t.Fatal("October's run the ledger refused: want an error")
	}
	wantAge(octEnd, "October's run refused")
	l.mu.Lock()
	l.refuse = nil
	l.mu.Unlock()
	clk.Set(sh(11, 1, 3))
	if resp := remitted(t, s, "2026-10"); len(resp.Remittances) != 1 || resp.Remittances[0].Amount != "150.00" {
		t.Fatalf("October again: %v; want 150.00 remitted", resp)
	}
	wantAge(novEnd, "October remitted, November not run")
	wantLast(sh(10, 1, 0))

	// November: every month that has ended is remitted (December, once it
	// has ended on the machine's clock, is not).
	clk.Set(sh(12, 1, 2))
	remitted(t, s, "2026-11")
	wantAge(time.Date(2027, 1, 1, 0, 0, 0, 0, shanghai), "every month to November remitted")
	wantLast(sh(11, 1, 0))

	// October run again (a backfill): its record stays the first.
	clk.Set(sh(12, 5, 0))
	remitted(t, s, "2026-10")
	var completed time.Time
	if err := s.d.Pool.QueryRow(ctx, `select completed_at from tax.remittance_runs where period = '2026-10'`).Scan(&completed); err != nil ||
		!completed.Equal(sh(11, 1, 3)) {
		t.Errorf("October's run recorded completed at %v (%v); want its first complete run's %v", completed, err, sh(11, 1, 3))
	}
	wantLast(sh(11, 1, 0))
}

// Settlement's new schedules run at once the months from the 1st of the
// month before (a backfill after a restore onto a new Temporal): a month
// remitted already is run again, before the next month's first run or
// after it. Nothing is posted twice, no withholding moves to another
// remittance, and a late withholding of the month (its settlement posted
// after the month's run) still goes with the next month's: every
// withholding's tax is posted once in all.
func TestRemitTaxRunAgainByABackfillPostsNothingTwice(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	shanghai := taxperiod.Default().Location()
	sh := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, shanghai) }
	posted := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var out []string
		for _, r := range l.reqs {
			out = append(out, r.IdempotencyKey+" "+r.Postings[0].Amount)
		}
		return out
	}
	answered := func(resp *taxv1.RemitTaxResponse) []string {
		var out []string
		for _, r := range resp.Remittances {
			out = append(out, r.RemittanceId+" "+r.Amount+" "+r.Status)
		}
		return out
	}
	clk.Set(sh(2026, 11, 10, 9))
	compute(t, s, "p-nov", "1000.00", "0.25", "individual", "k-nov") // 150.00 CN
	clk.Set(sh(2026, 12, 1, 2))
	nov := answered(remitted(t, s, "2026-11"))
	clk.Set(sh(2026, 12, 10, 9))
	compute(t, s, "p-dec", "1000.00", "0.20", "individual", "k-dec") // 160.00 CN
	clk.Set(sh(2026, 12, 31, 23))
	late := record(t, s, "p-late", "1000.00", "0.20", "individual", "k-late") // 160.00 CN, posted after December's run
	clk.Set(sh(2027, 1, 1, 2))
	dec := answered(remitted(t, s, "2026-12"))
	l.settle("k-late", late.Jurisdiction, late.Currency, late.TaxWithheld)
	known(t, s, "p-bj", "individual", "CN-BJ", 1)
	clk.Set(sh(2027, 1, 20, 9))
	compute(t, s, "p-bj", "1000.00", "0.25", "", "k-jan") // 150.00 CN-BJ
	if want := []string{"rem-2026-11-CN-CNY 150.00", "rem-2026-12-CN-CNY 160.00"}; !slices.Equal(posted(), want) {
		t.Fatalf("posted %v; want %v", posted(), want)
	}

	// Restored on 2 February from a snapshot of 20 January: the backfill
	// runs December again, then January (its 1st's run lost), then
	// November is run again by hand.
	clk.Set(sh(2027, 2, 2, 10))
	if got := answered(remitted(t, s, "2026-12")); !slices.Equal(got, dec) {
		t.Errorf("December again: %v; want %v, the late withholding left to January", got, dec)
	}
	jan := answered(remitted(t, s, "2027-01"))
	if want := []string{"rem-2027-01-CN-CNY 160.00 remitted", "rem-2027-01-CN-BJ-CNY 150.00 remitted"}; !slices.Equal(slices.Sorted(slices.Values(jan)), slices.Sorted(slices.Values(want))) {
		t.Errorf("January: %v; want %v", jan, want)
	}
	for period, want := range map[string][]string{"2026-11": nov, "2026-12": dec, "2027-01": jan} {
		if got := answered(remitted(t, s, period)); !slices.Equal(got, want) {
			t.Errorf("%s again: %v; want %v", period, got, want)
		}
	}
	if got := posted(); len(got) != 4 {
		t.Fatalf("posted %v; want November's, December's and January's two, each once", got)
	}
	// Every withholding's tax is in one remittance, posted once: the
	// postings add up to the withholdings.
	var sumPosted, sumWithheld decimal.Decimal
	for _, r := range l.reqs {
		sumPosted = sumPosted.Add(decimal.RequireFromString(r.Postings[0].Amount))
	}
	for _, w := range []string{"150.00", "160.00", "160.00", "150.00"} {
		sumWithheld = sumWithheld.Add(decimal.RequireFromString(w))
	}
	if !sumPosted.Equal(sumWithheld) {
		t.Errorf("posted %s in all (%v); want %s, every withholding once", sumPosted, posted(), sumWithheld)
	}
	var unremitted int
	if err := s.d.Pool.QueryRow(context.Background(), `select count(*) from tax.withholdings where remittance_id is null`).Scan(&unremitted); err != nil || unremitted != 0 {
		t.Errorf("%d withholdings in no remittance (%v); want 0", unremitted, err)
	}
}
