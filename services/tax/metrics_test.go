package tax

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A remittance not posted and tax withheld in no remittance are on
// /metrics by age: a run the ledger refused, or one that never ran, showed
// in the Temporal UI only.
func TestRemittanceAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "tax", migrations.For("tax"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	for _, q := range []string{
		`insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency, gross, commission, taxable_base,
			tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id, settlement_tx_id, created_at) values
			('wh-1', 'k-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-1', 'tx-1', now() - interval '40 days'),
			('wh-2', 'k-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-2', null, now() - interval '90 days')`,
		`insert into tax.remittances (remittance_id, period, jurisdiction, currency, amount, status, created_at)
			values ('rem-2026-01-CN-CNY', '2026-01', 'CN', 'CNY', 15, 'pending', now() - interval '2 days')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// wh-2's settlement was never found posted (no run looked it up, or
	// the ledger refused it): it counts too, a run that never came found
	// nothing posted.
	for name, days := range map[string]float64{"gpubill_tax_unremitted_age_seconds": 90, "gpubill_tax_remittance_pending_age_seconds": 2} {
		if v := metric(name); v < days*86400 || v > days*86400+600 {
			t.Errorf("%s: %v, want about %v days", name, v, days)
		}
	}
}

// A remittance reversed in the ledger and not remitted again (no other of
// its period, jurisdiction and currency remitted: none planned, or one
// pending) is on /metrics, counted and by the age since it was found
// reversed: tax owed to the authority, unpaid, with no alert.
func TestReversedRemittanceNotRemittedAgain(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "tax", migrations.For("tax"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	// January's reversal is remitted again (-2 remitted): not counted.
	// February's waits for a plan, March's -2 is pending (the ledger
	// refused it).
	if _, err := pool.Exec(ctx, `insert into tax.remittances (remittance_id, period, jurisdiction, currency, amount, status, transaction_id,
			reversed_by, reversed_at, created_at) values
		('rem-2026-01-CN-CNY', '2026-01', 'CN', 'CNY', 15, 'reversed', 'tx-1', 'tx-r1', now() - interval '9 hours', now() - interval '40 days'),
		('rem-2026-01-CN-CNY-2', '2026-01', 'CN', 'CNY', 15, 'remitted', 'tx-2', '', null, now() - interval '9 hours'),
		('rem-2026-02-CN-CNY', '2026-02', 'CN', 'CNY', 15, 'reversed', 'tx-3', 'tx-r3', now() - interval '3 hours', now() - interval '10 days'),
		('rem-2026-03-CN-CNY', '2026-03', 'CN', 'CNY', 15, 'reversed', 'tx-4', 'tx-r4', now() - interval '1 hour', now() - interval '2 days'),
		('rem-2026-03-CN-CNY-2', '2026-03', 'CN', 'CNY', 15, 'pending', '', '', null, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if v := metric("gpubill_tax_remittances_reversed_unremitted"); v != 2 {
		t.Errorf("gpubill_tax_remittances_reversed_unremitted: %v, want 2 (February's, March's)", v)
	}
	if v := metric("gpubill_tax_remittance_reversed_age_seconds"); v < 3*3600 || v > 3*3600+600 {
		t.Errorf("gpubill_tax_remittance_reversed_age_seconds: %v, want about 3 hours (February's)", v)
	}
}

// The withholdings of a filed month that no remittance holds (their
// settlements posted after the month's run) are on /metrics: counted and
// totalled by jurisdiction and currency, and by how long past their
// month's end the oldest is. Finance could not see tax withheld and not
// remitted past its month until GpubillTaxNotRemitted paged at 33 days.
func TestLateWithholdingsOfAFiledMonth(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "tax", migrations.For("tax"))
	ctx := context.Background()
	// January is filed by its recorded run (nothing owed), February by its
	// remittance; March is not filed. Times are Shanghai's (the default
	// tax zone): wh-jan is January's there, wh-mar March's.
	for _, q := range []string{
		`insert into tax.remittance_runs (period, completed_at, remittances, not_posted) values ('2026-01', '2026-02-01 02:00+08', 0, 1)`,
		`insert into tax.remittances (remittance_id, period, jurisdiction, currency, amount, status, created_at)
			values ('rem-2026-02-CN-CNY', '2026-02', 'CN', 'CNY', 15, 'remitted', '2026-03-01 02:00+08')`,
		`insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency, gross, commission, taxable_base,
			tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id, settlement_tx_id, remittance_id, created_at) values
			('wh-jan', 'k-jan', 'p-1', 'cyc-20260131', 'CNY', 100, 25, 75, 15.50, 60, 'individual', 'CN', 'flat20', '1', 'c-1', 'tx-1', null, '2026-01-31 23:00+08'),
			('wh-feb', 'k-feb', 'p-2', 'cyc-20260210', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-2', 'tx-2', 'rem-2026-02-CN-CNY', '2026-02-10 09:00+08'),
			('wh-feb-late', 'k-feb-late', 'p-3', 'cyc-20260228', 'CNY', 100, 25, 75, 15.25, 60, 'individual', 'CN', 'flat20', '1', 'c-3', null, null, '2026-02-28 23:00+08'),
			('wh-feb-us', 'k-feb-us', 'p-4', 'cyc-20260228', 'USD', 100, 25, 75, 7, 60, 'individual', 'US', 'flat20', '1', 'c-4', null, null, '2026-02-28 23:30+08'),
			('wh-mar', 'k-mar', 'p-5', 'cyc-20260301', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-5', null, null, '2026-03-01 01:00+08')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	byLabels := func(name string) map[string]float64 {
		t.Helper()
		for _, m := range Metrics() {
			if m.Name != name {
				continue
			}
			rows, err := pool.Query(ctx, m.Query)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := map[string]float64{}
			for rows.Next() {
				var j, c string
				var v float64
				if err := rows.Scan(&j, &c, &v); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got[j+" "+c] = v
			}
			return got
		}
		t.Fatalf("no metric %s", name)
		return nil
	}
	if got, want := byLabels("gpubill_tax_late_withholdings"), map[string]float64{"CN CNY": 2, "US USD": 1}; !maps.Equal(got, want) {
		t.Errorf("gpubill_tax_late_withholdings = %v; want %v (wh-jan, wh-feb-late; wh-feb-us)", got, want)
	}
	if got, want := byLabels("gpubill_tax_late_withholdings_amount"), map[string]float64{"CN CNY": 30.75, "US USD": 7}; !maps.Equal(got, want) {
		t.Errorf("gpubill_tax_late_withholdings_amount = %v; want %v", got, want)
	}
	janEnd := time.Date(2026, 2, 1, 0, 0, 0, 0, taxperiod.Default().Location())
	if v, want := testkit.SQLMetric(t, pool, Metrics(), "gpubill_tax_late_withholding_age_seconds"), time.Since(janEnd).Seconds(); v < want-600 || v > want+600 {
		t.Errorf("gpubill_tax_late_withholding_age_seconds = %v; want about %v (since January's end in Shanghai)", v, want)
	}
}

// A withholding no remittance holds is overdue once the filing that
// should take it was due: its month's, or, for one of a month filed
// already (its settlement posted after the filing), the next month's.
// GpubillTaxNotRemitted read its age: one of 1 November posted after
// November's filing, waiting for December's filing (due on 1 January),
// paged on 4 December at 33 days.
func TestUnremittedOverdue(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "tax", migrations.For("tax"))
	ctx := context.Background()
	zone := taxperiod.Default().Location()
	var now time.Time
	if err := pool.QueryRow(ctx, `select now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	now = now.In(zone)
	cur := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, zone) // the month now, in the tax zone
	prev, prev2 := cur.AddDate(0, -1, 0), cur.AddDate(0, -2, 0)
	insert := func(id string, at time.Time) {
		t.Helper()
		if _, err := pool.Exec(ctx, `insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency,
				gross, commission, taxable_base, tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id,
				created_at) values ($1, $1, 'p-1', 'cyc-20260101', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', $1, $2)`,
			id, at); err != nil {
			t.Fatal(err)
		}
	}
	near := func(got, want float64) bool { return got >= want-600 && got <= want+600 }
	overdue := func() float64 {
		t.Helper()
		return testkit.SQLMetric(t, pool, Metrics(), "gpubill_tax_unremitted_overdue_seconds")
	}

	// Last month's withholding, its month not filed: due with last month's
	// filing, at this month's start.
	insert("wh-prev", prev.Add(time.Hour))
	if v, want := overdue(), now.Sub(cur).Seconds(); !near(v, want) {
		t.Errorf("last month not filed: overdue %v; want about %v (since this month's start)", v, want)
	}
	// Last month filed without it (settlement posted since): it waits for
	// this month's filing, not due yet, though older than 33 days.
	if _, err := pool.Exec(ctx, `insert into tax.remittance_runs (period, completed_at, remittances, not_posted) values ($1, $2, 0, 1)`,
		prev.Format("2006-01"), cur.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if v := overdue(); v != 0 {
		t.Errorf("last month filed, its late withholding waiting for this month's filing: overdue %v; want 0 (age %v days)", v,
			testkit.SQLMetric(t, pool, Metrics(), "gpubill_tax_unremitted_age_seconds")/86400)
	}
	// A withholding of the month before, which last month's filing did
	// not take either: overdue since last month's filing was due.
	insert("wh-prev2", prev2.Add(time.Hour))
	if v, want := overdue(), now.Sub(cur).Seconds(); !near(v, want) {
		t.Errorf("a withholding two months back missed last month's filing: overdue %v; want about %v", v, want)
	}
}
