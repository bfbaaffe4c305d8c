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
	}}
}
