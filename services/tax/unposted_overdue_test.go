package tax

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A withholding whose settlement the ledger never posts is in no filing:
// each run leaves it out (not posted) and counts it outstanding. Its
// month's filing leaves it to the next one, as it does one posted late
// (the gauge cannot tell them apart until the next run asks the ledger),
// so it waits, not paging, until the next month's filing was due; once that
// filing has passed without it, it is overdue (GpubillTaxNotRemitted pages
// 9 days on) and stays so: it does not move on to each next filing. Through
// the service's runs, the gauge read on the database's clock (the runs'
// times set to match it).
func TestUnpostedWithholdingBecomesOverdue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		give       int  // how many months before this one it was withheld; each month from it to the last is filed
		wantDueNow bool // overdue since this month's start (the next month's filing after its own); else 0
	}{
		{"last month's, its month filed: waits for this month's filing", 1, false},
		{"of the month before, two filings passed: overdue since the second was due", 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, clk := newTax(t)
			ctx := context.Background()
			zone := taxperiod.Default().Location()
			var now time.Time
			if err := s.d.Pool.QueryRow(ctx, `select now()`).Scan(&now); err != nil {
				t.Fatal(err)
			}
			now = now.In(zone)
			cur := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, zone) // this month, in the tax zone
			clk.Set(cur.AddDate(0, -tt.give, 1))
			record(t, s, "p-x", "1000.00", "0.25", "individual", "k-x") // 150.00, its settlement never posted
			for back := tt.give; back >= 1; back-- {
				month := cur.AddDate(0, -back, 0)
				clk.Set(month.AddDate(0, 1, 0).Add(time.Minute)) // the month's run, on the 1st after it
				got := remitted(t, s, month.Format("2006-01"))
				if len(got.Remittances) != 0 || got.WithholdingsNotPosted != 1 ||
					got.WithholdingsOutstanding != 1 {
					t.Fatalf("%s filed: %v, not posted %d, outstanding %d; want nothing filed, k-x not posted and outstanding",
						month.Format("2006-01"), remIDs(got.Remittances), got.WithholdingsNotPosted, got.WithholdingsOutstanding)
				}
			}
			want := 0.0
			if tt.wantDueNow {
				want = now.Sub(cur).Seconds()
			}
			if v := testkit.SQLMetric(t, s.d.Pool, Metrics(), "gpubill_tax_unremitted_overdue_seconds"); v < want-600 || v > want+600 {
				t.Errorf("gpubill_tax_unremitted_overdue_seconds = %.0f (%.1f days); want about %.0f (withheld %d months back, never posted)",
					v, v/86400, want, tt.give)
			}
		})
	}
}
