package ledger_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// TestStatementAgeByAccount: the age of the latest statement was one
// series per currency, the newest close of any account, so an account
// whose feed stopped while another account in its currency kept going
// never looked stale. Each account is a series now, its age counted in
// calendar seconds and in business days (Saturdays and Sundays not
// counted) for GpubillBankStatementStale.
func TestStatementAgeByAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for _, st := range []struct{ id, currency, account string }{
		{"cn1-fresh", "CNY", "CN-CLIENT-1"},
		{"cn2-stalled", "CNY", "CN-CLIENT-2"},
		{"us1-fresh", "USD", "US-CLIENT-1"},
	} {
		day := today.AddDate(0, 0, -1)
		if strings.HasSuffix(st.id, "stalled") {
			day = today.AddDate(0, 0, -15)
		}
		if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: st.id, Currency: st.currency,
			Account: st.account, Format: "csv",
			Content: "date,reference,amount,balance\n" + day.Format(time.DateOnly) + ",interest,0.01,0.01\n"}); err != nil {
			t.Fatal(err)
		}
	}
	// A later statement of the live account, and an older one of the
	// stalled account: each series is its own account's latest.
	importCSV(t, f, "cn1-older", "date,reference,amount,balance\n"+today.AddDate(0, 0, -20).Format(time.DateOnly)+",interest,0.01,0.01\n")

	closes := map[string]time.Time{
		"CNY/CN-CLIENT-1": today, // yesterday's statement closes at the end of yesterday
		"CNY/CN-CLIENT-2": today.AddDate(0, 0, -14),
		"USD/US-CLIENT-1": today,
	}
	ages := statementGauges(t, f, "gpubill_reconciliation_latest_statement_age_seconds")
	if len(ages) != len(closes) {
		t.Fatalf("age series %v; want one per account, closing at %v", ages, closes)
	}
	days := statementGauges(t, f, "gpubill_reconciliation_latest_statement_age_business_days")
	if len(days) != len(closes) {
		t.Fatalf("business-day series %v; want one per account, closing at %v", days, closes)
	}
	now := time.Now()
	for series, closeAt := range closes {
		// Read on scrape against the database's clock, a moment before now.
		if age, want := ages[series], now.Sub(closeAt).Seconds(); math.Abs(age-want) > 5 {
			t.Errorf("%s: age %v s; want %v (since its latest close %s)", series, age, want, closeAt)
		}
		if got, want := days[series], weekdaysBetween(closeAt, now); math.Abs(got-want) > 0.002 {
			t.Errorf("%s: %v business days; want %v (from %s to now, Saturdays and Sundays not counted)", series, got, want, closeAt)
		}
	}
	// 14 days hold 10 weekdays: the stalled account is over the alert's 3
	// whatever today is, the live one under it.
	if d := days["CNY/CN-CLIENT-2"]; d < 9 || d > 11 {
		t.Errorf("the stalled account's latest statement is %v business days old; want 9 to 11", d)
	}
	if d := days["CNY/CN-CLIENT-1"]; d > 1 {
		t.Errorf("the live account's latest statement is %v business days old; want at most 1", d)
	}
}

// weekdaysBetween counts the minutes from from to to that fall on a
// Monday to Friday (UTC), in days: the reference the gauge is held to.
func weekdaysBetween(from, to time.Time) float64 {
	var minutes int
	for m := from.UTC(); m.Before(to); m = m.Add(time.Minute) {
		if wd := m.Weekday(); wd != time.Saturday && wd != time.Sunday {
			minutes++
		}
	}
	return float64(minutes) / (24 * 60)
}

// statementGauges reads a gauge of ledger.Metrics labelled by its leading
// columns: its values by those labels joined with "/".
func statementGauges(t *testing.T, f *fixture, name string) map[string]float64 {
	t.Helper()
	for _, m := range ledger.Metrics() {
		if m.Name != name {
			continue
		}
		rows, err := f.pool.Query(f.ctx, m.Query)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer rows.Close()
		out := map[string]float64{}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			labels := make([]string, len(vals)-1)
			for i, v := range vals[:len(vals)-1] {
				labels[i] = fmt.Sprint(v)
			}
			v, ok := vals[len(vals)-1].(float64)
			if !ok {
				t.Fatalf("%s: value %T %v; want float8", name, vals[len(vals)-1], vals[len(vals)-1])
			}
			out[strings.Join(labels, "/")] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestStatementAgeInBusinessDays: banks issue no statements at weekends,
// so Friday's is the latest until Monday's is imported, on Tuesday or by
// the Wednesday run that expects it. Counted in calendar days it passed
// GpubillBankStatementStale's 3 days every week; counted in business days
// it is no older then than Tuesday's on a Thursday. 2026-12-04 is a
// Friday; the session's zone is not UTC, and the weekend is UTC's, the
// zone a statement's date closes in.
func TestStatementAgeInBusinessDays(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tests := []struct {
		name     string
		giveFrom string // the latest statement's close
		giveTo   string // the scrape
		want     float64
	}{
		{"Tuesday's statement on Thursday, before the run", "2026-12-02 00:00Z", "2026-12-04 06:00Z", 2.25},
		{"Friday's statement on Monday evening", "2026-12-05 00:00Z", "2026-12-07 20:00Z", 20.0 / 24},
		{"Friday's statement on Wednesday, before the run that expects Monday's", "2026-12-05 00:00Z", "2026-12-09 06:00Z", 2.25},
		{"Friday's statement on Thursday, Monday's never came", "2026-12-05 00:00Z", "2026-12-10 06:00Z", 3.25},
		{"a close the bank dates on Friday afternoon, on Monday", "2026-12-04 17:00+08", "2026-12-07 09:00Z", 1},
		{"a Saturday statement, on Monday", "2026-12-06 00:00Z", "2026-12-07 12:00Z", 0.5},
		{"three weeks without a statement", "2026-12-01 00:00Z", "2026-12-22 00:00Z", 15},
		{"a close ahead of the scrape", "2026-12-09 00:00Z", "2026-12-08 12:00Z", 0},
		{"a close later the same day", "2026-12-08 18:00Z", "2026-12-08 12:00Z", 0},
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	if _, err := tx.Exec(f.ctx, "set local timezone = 'Asia/Shanghai'"); err != nil {
		t.Fatal(err)
	}
	q := "select " + ledger.BusinessDaysSQL("$1::timestamptz", "$2::timestamptz")
	for _, tt := range tests {
		var got float64
		if err := tx.QueryRow(f.ctx, q, tt.giveFrom, tt.giveTo).Scan(&got); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s (%s to %s): %v business days; want %v", tt.name, tt.giveFrom, tt.giveTo, got, tt.want)
		}
	}
}
