package tax

import (
	"context"
	"slices"
	"testing"
	"time"

	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// A month's remittance is filed once: withholdings of the month left out of
// it (their settlements posted after its run) go with the next month's
// filing, never into a new remittance of the filed month. A re-run of
// February after a US withholding of February was posted made
// rem-2026-02-US-CNY, remitting it under a month already filed; and the
// month's answer said nothing of the tax of it still outstanding.
func TestRemitTaxFiledMonthTakesNoLateWithholding(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	known(t, s, "p-us", "individual", "US", 1)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // CN 150.00, 20 February
	us := record(t, s, "p-us", "1000.00", "0.20", "", "k-us")   // US 160.00, its settlement not posted yet
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	feb := remitted(t, s, "2026-02")
	if got := remIDs(feb.Remittances); !slices.Equal(got, []string{"rem-2026-02-CN-CNY 150.00 remitted"}) || feb.WithholdingsNotPosted != 1 ||
		feb.WithholdingsOutstanding != 1 {
		t.Fatalf("February = %v (not posted %d, outstanding %d); want CN's 150.00 alone, p-us's outstanding", got,
			feb.WithholdingsNotPosted, feb.WithholdingsOutstanding)
	}
	l.settle("k-us", us.Jurisdiction, us.Currency, us.TaxWithheld) // posted on 10 March
	clk.Set(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC))
	feb = remitted(t, s, "2026-02")
	if got := remIDs(feb.Remittances); !slices.Equal(got, []string{"rem-2026-02-CN-CNY 150.00 remitted"}) || len(l.postedKeys()) != 1 {
		t.Fatalf("February run again = %v, posted %v; want February as filed, nothing posted", got, l.postedKeys())
	}
	if feb.WithholdingsNotPosted != 0 || feb.WithholdingsOutstanding != 1 {
		t.Fatalf("February run again: not posted %d, outstanding %d; want 0 and 1 (p-us's, posted after the filing)",
			feb.WithholdingsNotPosted, feb.WithholdingsOutstanding)
	}
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	mar := remitted(t, s, "2026-03")
	if got := remIDs(mar.Remittances); !slices.Equal(got, []string{"rem-2026-03-US-CNY 160.00 remitted"}) || mar.WithholdingsOutstanding != 0 {
		t.Fatalf("March = %v (outstanding %d); want p-us's 160.00 in March's filing, nothing outstanding", got, mar.WithholdingsOutstanding)
	}
	if feb = remitted(t, s, "2026-02"); feb.WithholdingsOutstanding != 0 {
		t.Fatalf("February after March's filing: outstanding %d; want 0", feb.WithholdingsOutstanding)
	}
	wantPostedOnce(t, s, l, []string{"150.00", "160.00"})
}

// A remittance reversed in the ledger is paid again by a new remittance of
// its month holding the withholdings it held, and no other: a withholding
// of the month posted after the month was filed went into the new one
// (rem-2026-02-CN-CNY-2 of 310.00), remitted under the filed month.
func TestRemitTaxReversedMonthPaysAgainOnlyWhatItHeld(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00, 20 February
	clk.Set(time.Date(2026, 2, 27, 0, 0, 0, 0, time.UTC))
	late := record(t, s, "p-late", "1000.00", "0.20", "individual", "k-late") // 160.00, posted after February's run
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	remitted(t, s, "2026-02")
	l.settle("k-late", late.Jurisdiction, late.Currency, late.TaxWithheld)
	l.reverseTx(t, "rem-2026-02-CN-CNY", "tx-reversal")
	clk.Set(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))
	feb := remitted(t, s, "2026-02")
	want := []string{"rem-2026-02-CN-CNY 150.00 reversed", "rem-2026-02-CN-CNY-2 150.00 remitted"}
	if got := remIDs(feb.Remittances); !slices.Equal(got, want) || feb.WithholdingsOutstanding != 1 {
		t.Fatalf("February run again = %v (outstanding %d); want %v, p-late outstanding", got, feb.WithholdingsOutstanding, want)
	}
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	if got := remIDs(remitted(t, s, "2026-03").Remittances); !slices.Equal(got, []string{"rem-2026-03-CN-CNY 160.00 remitted"}) {
		t.Fatalf("March = %v; want p-late's 160.00", got)
	}
	wantPostedOnce(t, s, l, []string{"150.00", "150.00", "160.00"})
}

func remIDs(rems []*taxv1.TaxRemittance) []string {
	out := make([]string, 0, len(rems))
	for _, r := range rems {
		out = append(out, r.RemittanceId+" "+r.Amount+" "+r.Status)
	}
	return out
}

// wantPostedOnce checks the ledger posted the amounts want (in order) and
// that no withholding is in no remittance.
func wantPostedOnce(t *testing.T, s *Service, l *ledgerConn, want []string) {
	t.Helper()
	var got []string
	for _, p := range l.postedKeys() {
		got = append(got, p[len(p)-len(want[0]):])
	}
	if len(got) != len(want) || !slices.Equal(got, want) {
		t.Errorf("posted %v; want amounts %v", l.postedKeys(), want)
	}
	var unremitted int
	if err := s.d.Pool.QueryRow(context.Background(), `select count(*) from tax.withholdings where remittance_id is null`).Scan(&unremitted); err != nil || unremitted != 0 {
		t.Errorf("%d withholdings in no remittance (%v); want 0", unremitted, err)
	}
}

// A month is filed once a later month is: the later month's filing took
// every withholding of it posted by then. A month before tax/0008 (its run
// never recorded) where nothing was owed read open, and a run of it by hand
// (GpubillTaxNotRemitted's runbook) filed under that month, long past, a
// withholding whose settlement the ledger posted after February's filing:
// rem-2026-01-CN-CNY, where March's filing was due to take it. February is
// filed by its remittance (its run not recorded either), or by its run
// where nothing was owed.
func TestRemitTaxMonthBeforeAFiledMonthTakesNoLateWithholding(t *testing.T) {
	t.Parallel()
	for _, febFiledBy := range []string{"remittance", "run"} {
		t.Run(febFiledBy, func(t *testing.T) {
			t.Parallel()
			s, l, clk := newTax(t)
			clk.Set(time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC))
			jan := record(t, s, "p-jan", "1000.00", "0.25", "individual", "k-jan") // 150.00, its settlement not posted yet
			clk.Set(time.Date(2026, 2, 2, 0, 0, 0, 0, time.UTC))
			if got := remIDs(remitted(t, s, "2026-01").Remittances); len(got) != 0 {
				t.Fatalf("January = %v; want nothing (k-jan not posted)", got)
			}
			want := []string{"150.00"}
			if febFiledBy == "remittance" {
				clk.Set(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC))
				compute(t, s, "p-feb", "1000.00", "0.20", "individual", "k-feb") // 160.00
				want = []string{"160.00", "150.00"}
			}
			clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
			remitted(t, s, "2026-02")
			// January's run was before tax/0008, and February's too when
			// its remittance files it: not recorded.
			unrecorded := "2026-01"
			if febFiledBy == "remittance" {
				unrecorded = "2026-02"
			}
			if _, err := s.d.Pool.Exec(context.Background(), `delete from tax.remittance_runs where period <= $1`, unrecorded); err != nil {
				t.Fatal(err)
			}
			l.settle("k-jan", jan.Jurisdiction, jan.Currency, jan.TaxWithheld) // posted after February's filing
			clk.Set(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC))
			if got := remitted(t, s, "2026-01"); len(got.Remittances) != 0 || got.WithholdingsOutstanding != 1 {
				t.Fatalf("January run by hand = %v (outstanding %d), posted %v; want nothing: k-jan goes with March's filing",
					remIDs(got.Remittances), got.WithholdingsOutstanding, l.postedKeys())
			}
			clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
			if got := remIDs(remitted(t, s, "2026-03").Remittances); !slices.Equal(got, []string{"rem-2026-03-CN-CNY 150.00 remitted"}) {
				t.Fatalf("March = %v; want k-jan's 150.00", got)
			}
			wantPostedOnce(t, s, l, want)
		})
	}
}
