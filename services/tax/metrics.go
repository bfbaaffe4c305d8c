package tax

import "github.com/gpubill/gpubill/pkg/obs"

// Metrics implements svc.MetricsSource: the remittances' progress, read on
// scrape.
func (s *Service) Metrics() []obs.SQLMetric { return Metrics() }

// Metrics are the tax service's metrics. A remittance run the ledger
// refused fails after a day of retries, and one that never ran leaves the
// month unremitted: both showed in the Temporal UI only, tax owed to the
// authority unpaid with nobody told.
func Metrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		Name: "gpubill_tax_remittance_pending_age_seconds", Type: obs.Gauge,
		Help:  "Age of the oldest tax remittance planned and not posted to the ledger (0: none): the ledger refused it, or its run stopped.",
		Query: `select coalesce(extract(epoch from now() - min(created_at)), 0)::float8 from tax.remittances where status = 'pending'`,
	}, {
		Name: "gpubill_tax_unremitted_age_seconds", Type: obs.Gauge,
		// Not only those a run has found posted (settlement_tx_id): a run
		// that never came found none.
		Help: "Age of the oldest withholding no remittance holds yet (0: none); a month's are remitted on the 1st after it, so " +
			"past about 33 days a remittance did not run, or the withholding's settlement was never posted.",
		Query: `select coalesce(extract(epoch from now() - min(created_at)), 0)::float8 from tax.withholdings where remittance_id is null`,
	}, {
		Name: "gpubill_tax_remittance_reversed_age_seconds", Type: obs.Gauge,
		Help: "Age, since the tax service found it reversed, of the oldest tax remittance reversed in the ledger whose tax is not " +
			"remitted again (0: none); the check every 10 minutes remits it again at once unless the ledger refuses it.",
		Query: `select coalesce(extract(epoch from now() - min(r.reversed_at)), 0)::float8 from tax.remittances r where ` + reversedUnremitted,
	}, {
		Name: "gpubill_tax_remittances_reversed_unremitted", Type: obs.Gauge,
		Help: "Tax remittances reversed in the ledger whose tax is not remitted again (no remittance of their period, jurisdiction and " +
			"currency remitted since): the new one is refused or pending, or none is planned.",
		Query: `select count(*)::float8 from tax.remittances r where ` + reversedUnremitted,
	}}
}

// reversedUnremitted selects a reversed remittance r whose tax no
// remittance of its period, jurisdiction and currency remits: none
// remitted, and none reversed after it (the tax was remitted again until
// then: one unpaid amount, counted from the latest reversal).
const reversedUnremitted = `r.status = 'reversed' and not exists (select 1 from tax.remittances o
	where o.period = r.period and o.jurisdiction = r.jurisdiction and o.currency = r.currency
	  and (o.status = 'remitted' or (o.status = 'reversed' and o.reversed_at > r.reversed_at)))`
