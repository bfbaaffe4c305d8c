package tax

import (
	"strings"

	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/taxperiod"
)

// Metrics implements svc.MetricsSource: the remittances' progress, read on
// scrape; the months are those of the configured tax zone.
func (s *Service) Metrics() []obs.SQLMetric { return metricsIn(s.d.TaxPeriods) }

// Metrics are the tax service's metrics (months in the default tax zone).
// A remittance run the ledger refused fails after a day of retries, and
// one that never ran leaves the month unremitted: both showed in the
// Temporal UI only, tax owed to the authority unpaid with nobody told.
func Metrics() []obs.SQLMetric { return metricsIn(taxperiod.Default()) }

func metricsIn(taxPeriods taxperiod.Calendar) []obs.SQLMetric {
	zone := "'" + strings.ReplaceAll(taxPeriods.Location().String(), "'", "''") + "'"
	return []obs.SQLMetric{{
		// The paged gauges first: a scrape's reads are bounded in all
		// (obs.SQLCollector; those past the bound vanish from the scrape).
		Name: "gpubill_tax_remittance_pending_age_seconds", Type: obs.Gauge,
		Help:  "Age of the oldest tax remittance planned and not posted to the ledger (0: none): the ledger refused it, or its run stopped.",
		Query: `select coalesce(extract(epoch from now() - min(created_at)), 0)::float8 from tax.remittances where status = 'pending'`,
	}, unremittedOverdue(zone), {
		Name: "gpubill_tax_remittance_reversed_age_seconds", Type: obs.Gauge,
		Help: "Age, since the tax service found it reversed, of the oldest tax remittance reversed in the ledger whose tax is not " +
			"remitted again (0: none); the check every 10 minutes remits it again at once unless the ledger refuses it.",
		Query: `select coalesce(extract(epoch from now() - min(r.reversed_at)), 0)::float8 from tax.remittances r where ` + reversedUnremitted,
	}, unremittedMonth(zone), {
		Name: "gpubill_tax_unremitted_age_seconds", Type: obs.Gauge,
		// Not only those a run has found posted (settlement_tx_id): a run
		// that never came found none.
		Help: "Age of the oldest withholding no remittance holds yet (0: none); a month's are remitted on the 1st after it, one " +
			"posted after its month was filed with the next month's (gpubill_tax_unremitted_overdue_seconds says when one is due).",
		Query: `select coalesce(extract(epoch from now() - min(created_at)), 0)::float8 from tax.withholdings where remittance_id is null`,
	}, {
		Name: "gpubill_tax_remittances_reversed_unremitted", Type: obs.Gauge,
		Help: "Tax remittances reversed in the ledger whose tax is not remitted again (no remittance of their period, jurisdiction and " +
			"currency remitted since): the new one is refused or pending, or none is planned.",
		Query: `select count(*)::float8 from tax.remittances r where ` + reversedUnremitted,
	}, {
		Name: "gpubill_tax_last_remitted_period_timestamp_seconds", Type: obs.Gauge,
		Help:  "Start of the latest month (in the tax zone) whose remittance run completed (0: none yet).",
		Query: `select coalesce((select extract(epoch from to_date(period, 'YYYY-MM')::timestamp at time zone ` + zone + `) from tax.remittance_runs order by period desc limit 1), 0)::float8`,
	}, {
		Name: "gpubill_tax_late_withholding_age_seconds", Type: obs.Gauge,
		Help: "Time since the end of the month (in the tax zone) of the oldest withholding of a filed month that no remittance holds " +
			"(0: none): its settlement was not posted when the month was filed; it goes with the first month filed after the ledger " +
			"posts it.",
		Query: `select coalesce(extract(epoch from now() - ((date_trunc('month', min(w.created_at) at time zone ` + zone + `) + interval '1 month') at time zone ` + zone + `)), 0)::float8
			from ` + lateWithholdings(zone),
	}, {
		Name: "gpubill_tax_late_withholdings", Type: obs.Gauge, Labels: []string{"jurisdiction", "currency"},
		Help:  "Withholdings of filed months that no remittance holds (not posted when their month was filed), by jurisdiction and currency.",
		Query: `select w.jurisdiction, w.currency, count(*)::float8 from ` + lateWithholdings(zone) + ` group by 1, 2`,
	}, {
		Name: "gpubill_tax_late_withholdings_amount", Type: obs.Gauge, Labels: []string{"jurisdiction", "currency"},
		Help: "Tax withheld by the withholdings of filed months that no remittance holds, by jurisdiction and currency (major units): " +
			"owed to the authority past its month's filing.",
		Query: `select w.jurisdiction, w.currency, sum(w.tax_withheld)::float8 from ` + lateWithholdings(zone) + ` group by 1, 2`,
	}}
}

// lateWithholdings selects (as w) the withholdings of filed months that no
// remittance holds: recorded before the end (in the tax zone) of the latest
// month filed (its run recorded, or a remittance of it made: a month before
// a filed one is filed too, Store.PlanRemittances). Their month's filing
// left them out (their settlement not posted then, or a reversal gave them
// back: remitted again within the check's 10 minutes); each goes with the
// first month filed after the ledger posts it. Finance saw none of them:
// GpubillTaxNotRemitted reads a withholding's age at 33 days, whatever its
// month. Read through the index withholdings_unremitted.
func lateWithholdings(zone string) string {
	return `tax.withholdings w where w.remittance_id is null and w.created_at <
		(select (to_date(max(f.period), 'YYYY-MM') + interval '1 month')::timestamp at time zone ` + zone + `
		 from (select max(period) as period from tax.remittance_runs union all select max(period) from tax.remittances) f)`
}

// unremittedOverdue reads how long ago the filing that should have taken
// the oldest withholding no remittance holds was due. A withholding of a
// month not filed yet is due with its month's filing (the run on the 1st
// after it); one of a month filed already (a late one: its settlement
// posted after the filing) goes with the next month's filing, due at that
// month's end. GpubillTaxNotRemitted paged on the withholding's age (33
// days), so a late one waiting, rightly, for the next month's filing paged
// before that filing was due: a withholding of 1 February posted on
// 5 March paged on 6 March, March's filing due on 1 April. The due instant
// only grows with created_at (a month up to the latest filed is due at the
// end of the month after it, those after it at their own end), so the
// oldest unremitted withholding (the index withholdings_unremitted) has the
// earliest. A month is filed as Store.PlanRemittances decides: its run
// recorded, or a remittance of it or of a later month made. A withholding
// whose settlement is never posted is left out of its month's filing and
// of the next; it is overdue from the next one's due date on, and stays so
// (TestUnpostedWithholdingBecomesOverdue): it does not move on to each
// later filing. Due earlier, it would page for one posted after its
// month's filing and rightly waiting for the next: the gauge cannot tell
// the two apart until the next run asks the ledger.
func unremittedOverdue(zone string) obs.SQLMetric {
	return obs.SQLMetric{
		Name: "gpubill_tax_unremitted_overdue_seconds", Type: obs.Gauge,
		Help: "Time since the filing that should have taken the oldest withholding no remittance holds was due (0: none due yet): its " +
			"month's (at the month's end in the tax zone), or for one of a month filed already (its settlement not posted when it was " +
			"filed: posted since, or never) the next month's.",
		Query: `select coalesce(greatest(extract(epoch from now() - ((o.month + interval '1 month'
				+ case when to_char(o.month, 'YYYY-MM') <= f.period then interval '1 month' else interval '0' end) at time zone ` + zone + `)), 0), 0)::float8
			from (select date_trunc('month', min(created_at) at time zone ` + zone + `) as month
				from tax.withholdings where remittance_id is null) o,
				(select max(period) as period from (select max(period) as period from tax.remittance_runs
					union all select max(period) from tax.remittances) x) f`,
	}
}

// unremittedMonth reads the months whose remittance run completed
// (tax.remittance_runs). A month whose run never happened (Temporal lost
// over the 1st, the schedule paused, the run failing) was told only by a
// withholding's age past 33 days, after the month's filing deadline, and
// never for a month whose withholdings' settlements were not posted.
// Months in the tax zone (taxperiod, as RemitTax's), those that ended
// since months are recorded (tax.remittance_runs_from: the migration);
// one whose run completed is not asked for again.
func unremittedMonth(zone string) obs.SQLMetric {
	return obs.SQLMetric{
		// Every month since the migration (a few a year), each looked up
		// by its key.
		Name: "gpubill_tax_unremitted_month_age_seconds", Type: obs.Gauge,
		Help: "Time since the end of the oldest month (in the tax zone, ended since months are recorded) whose tax remittance run " +
			"has not completed (0: none); a month where nothing was owed completes too. The monthly run is at 02:00 on the 1st there.",
		Query: `select coalesce(extract(epoch from now() - min((m + interval '1 month') at time zone ` + zone + `)), 0)::float8
			from tax.remittance_runs_from f,
				generate_series(date_trunc('month', f.recorded_from at time zone ` + zone + `),
					date_trunc('month', now() at time zone ` + zone + `) - interval '1 month', interval '1 month') m
			where not exists (select 1 from tax.remittance_runs r where r.period = to_char(m, 'YYYY-MM'))`,
	}
}

// reversedUnremitted selects a reversed remittance r whose tax no
// remittance of its period, jurisdiction and currency remits: none
// remitted, and none reversed after it (the tax was remitted again until
// then: one unpaid amount, counted from the latest reversal).
const reversedUnremitted = `r.status = 'reversed' and not exists (select 1 from tax.remittances o
	where o.period = r.period and o.jurisdiction = r.jurisdiction and o.currency = r.currency
	  and (o.status = 'remitted' or (o.status = 'reversed' and o.reversed_at > r.reversed_at)))`
