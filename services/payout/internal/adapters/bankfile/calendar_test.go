package bankfile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/iso20022"
)

// Days of the week around day1 (Tuesday 1 December 2026) in Shanghai.
var (
	friday4   = time.Date(2026, 12, 4, 10, 0, 0, 0, shanghai)
	saturday5 = time.Date(2026, 12, 5, 10, 0, 0, 0, shanghai)
	sunday6   = time.Date(2026, 12, 6, 10, 0, 0, 0, shanghai)
)

// cutNow cuts the latest cutoff at the fixture's clock and returns the
// execution date its batch and its pain.001 ask for.
func (f *fixture) cutNow(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	id, built, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now())))
	if err != nil || !built {
		t.Fatalf("cut: %s built %v: %v", id, built, err)
	}
	b, err := f.r.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	file, err := f.r.BatchFile(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := iso20022.ParsePain001(file)
	if err != nil {
		t.Fatal(err)
	}
	exec := b.ExecutionDate.Format(time.DateOnly)
	for _, pi := range p.PaymentInfos {
		if got := pi.ExecutionDate.Format(time.DateOnly); got != exec {
			t.Errorf("batch %s executes on %s, its file's ReqdExctnDt says %s", id, exec, got)
		}
	}
	return exec
}

// A batch cut on a Saturday asked the bank to execute that Saturday
// (banks reject such a date or roll it), and a provider was told its
// payout arrives on the Saturday: both now say the next Monday. The rail
// keeps cutting on weekends, its files dated Monday.
func TestBatchCutOnSaturdayAsksForMonday(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	f.clk.Set(saturday5)
	if st := f.submit(t, "po-sat", "CNY", "150.00", bank("6222000011110001")); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-07" {
		t.Errorf("queued on Saturday: expected arrival %s, want 2026-12-07", st.ExpectedArrival.Format(time.DateOnly))
	}
	f.clk.Set(saturday5.Add(5 * time.Hour)) // 15:00, after Saturday's cutoff
	if got := f.cutNow(t); got != "2026-12-07" {
		t.Errorf("the batch cut on Saturday asks for %s, want Monday 2026-12-07", got)
	}
	if st := f.state(t, "po-sat"); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-07" {
		t.Errorf("batched on Saturday: expected arrival %s, want 2026-12-07", st.ExpectedArrival.Format(time.DateOnly))
	}
	f.clk.Set(sunday6)
	if st := f.submit(t, "po-sun", "CNY", "150.00", bank("6222000011110005")); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-07" {
		t.Errorf("queued on Sunday: expected arrival %s, want 2026-12-07", st.ExpectedArrival.Format(time.DateOnly))
	}
	f.clk.Set(sunday6.Add(5 * time.Hour))
	if got := f.cutNow(t); got != "2026-12-07" {
		t.Errorf("the batch cut on Sunday asks for %s, want Monday 2026-12-07", got)
	}
}

// Friday's cutoff cut late, on Saturday (the service was down over it),
// asked for "today", the Saturday: it asks for the first business day
// from today, the Monday, never a day before it.
func TestFridayCutoffCutOnSaturdayAsksForMonday(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	f.clk.Set(friday4)
	if st := f.submit(t, "po-fri", "CNY", "150.00", bank("6222000011110001")); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-04" {
		t.Errorf("queued Friday morning: expected arrival %s, want 2026-12-04", st.ExpectedArrival.Format(time.DateOnly))
	}
	f.clk.Set(saturday5.Add(-time.Hour)) // Saturday 09:00, before its cutoff: Friday's is the last
	if got := f.cutNow(t); got != "2026-12-07" {
		t.Errorf("Friday's cutoff cut on Saturday asks for %s, want Monday 2026-12-07", got)
	}
}

// A date in the holiday list is no execution date: a batch cut on it, or
// on the weekend before it, asks for the next business day.
func TestHolidayIsSkipped(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	f.r.Cfg.Holidays = []time.Time{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
	if st := f.submit(t, "po-hol", "CNY", "150.00", bank("6222000011110001")); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-02" {
		t.Errorf("queued on a holiday: expected arrival %s, want 2026-12-02", st.ExpectedArrival.Format(time.DateOnly))
	}
	f.clk.Set(day1.Add(5 * time.Hour))
	if got := f.cutNow(t); got != "2026-12-02" {
		t.Errorf("the batch cut on holiday 1 Dec asks for %s, want 2026-12-02", got)
	}
	f.clk.Set(saturday5)
	f.submit(t, "po-sat", "CNY", "150.00", bank("6222000011110005"))
	f.clk.Set(saturday5.Add(5 * time.Hour))
	if got := f.cutNow(t); got != "2026-12-08" {
		t.Errorf("the batch cut on the Saturday before holiday Monday 7 Dec asks for %s, want Tuesday 2026-12-08", got)
	}
}

// A holiday list that does not parse refuses to start, naming the entry:
// a misspelt date silently dropped would send files dated on that holiday.
func TestBadHolidayRefusesToStart(t *testing.T) {
	for give, want := range map[string]string{
		"2026-12-25, 2027-1-01": `"2027-1-01"`,
		"2026-12-25,2026-02-30": `"2026-02-30"`,
		"25/12/2026":            `"25/12/2026"`,
		"2026-12-25;2027-01-01": `"2026-12-25;2027-01-01"`,
		"2026-12-25,christmas":  `"christmas"`,
	} {
		if _, err := ParseHolidays(give); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseHolidays(%q): %v, want an error naming %s", give, err, want)
		}
	}
	for give, want := range map[string]int{"": 0, " 2026-12-25 , 2027-01-01 ": 2, "2026-12-25,": 1} {
		if got, err := ParseHolidays(give); err != nil || len(got) != want {
			t.Errorf("ParseHolidays(%q) = %v, %v; want %d dates", give, got, err, want)
		}
	}
}
