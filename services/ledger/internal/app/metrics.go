package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

var (
	chargesPosted = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_charges_posted_total",
		Help: "Usage charges posted to the ledger (renter wallet to provider pending), once each, by currency.",
	}, []string{"currency"})
	chargedMinor = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_charged_amount_minor_total",
		Help: "Amount of the posted usage charges in minor units (fen, cents) by currency; exact below 2^53 per process.",
	}, []string{"currency"})

	segregatedDifference = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpubill_segregated_funds_difference",
		Help: "Difference of the latest segregated-funds report of now, by currency, in currency units: resource (the bank statement's " +
			"balance when imported, else bank:client) less requirement and unremitted tax; negative is a shortfall.",
	}, []string{"currency"})
	segregatedLedgerDifference = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpubill_segregated_funds_ledger_difference",
		Help: "The ledger's own difference in the latest segregated-funds report of now, by currency, in currency units: bank:client " +
			"less requirement and unremitted tax; negative is client money the ledger itself does not hold (a statement lagging deposits never makes it so).",
	}, []string{"currency"})
	segregatedVerdict = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpubill_segregated_funds_verdict",
		Help: "Verdict of the latest segregated-funds report of now, by currency: 1 on its verdict (balanced, shortfall, excess), 0 on the others.",
	}, []string{"currency", "verdict"})
	// Recorded breaches are immutable: the count only grows, and the alert
	// GpubillSegregationBreachRecorded is on its growth (a breach was on
	// the report only, seen when someone asked for it).
	segregationBreaches = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpubill_segregation_breaches",
		Help: "Segregation breaches recorded, by currency, as the latest segregated-funds report of now counts them (a movement " +
			"across the client and house pools that settlement did not post).",
	}, []string{"currency"})
	segregatedAt = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpubill_segregated_funds_report_timestamp_seconds",
		Help: "When this process last computed a segregated-funds report of now, by currency (the ledger computes one per currency " +
			"every 10 minutes, and every GET /v1/reports/segregated-funds without as_of is one).",
	}, []string{"currency"})
	// Only the log said a report failed: after a restart with every report
	// failing, no series of the currency was there for the alerts to read.
	segregatedFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_segregated_funds_report_failures_total",
		Help: "Segregated-funds reports of now the ledger's 10-minute loop failed to compute, by currency (the ledger's log says why: " +
			"segregated-funds report for /metrics); the verdict gauges show the last report that succeeded.",
	}, []string{"currency"})
)

// SegregatedFundsFailed counts a failed report of now of the currency and
// makes sure its timestamp has a series: at 0 when no report succeeded
// since the start, so GpubillSegregatedFundsReportStale fires rather than
// read nothing (a timestamp already set is left as it is).
func SegregatedFundsFailed(currency string) {
	segregatedFailures.WithLabelValues(currency).Inc()
	segregatedAt.WithLabelValues(currency)
}

// recordSegregatedFunds shows a report of now on /metrics.
func recordSegregatedFunds(r *SegregatedFundsReport) {
	c := r.Currency.Code
	segregatedDifference.WithLabelValues(c).Set(r.Difference.InexactFloat64())
	segregatedLedgerDifference.WithLabelValues(c).Set(r.LedgerDifference.InexactFloat64())
	for _, v := range []string{VerdictBalanced, VerdictShortfall, VerdictExcess} {
		on := 0.0
		if v == r.Verdict {
			on = 1
		}
		segregatedVerdict.WithLabelValues(c, v).Set(on)
	}
	segregationBreaches.WithLabelValues(c).Set(float64(r.BreachesTotal))
	segregatedAt.WithLabelValues(c).Set(float64(r.AsOf.UnixNano()) / 1e9)
}

// countCharges counts charge transactions that were committed for the
// first time (a replayed charge is not in the list).
func countCharges(txs []*domain.Transaction) {
	for _, t := range txs {
		if t.Kind != domain.TxCharge || len(t.Postings) == 0 {
			continue
		}
		p := t.Postings[0] // the renter wallet's debit: the charge's amount
		cur, err := money.Lookup(p.Currency)
		if err != nil {
			continue // posted currencies were looked up before posting
		}
		chargesPosted.WithLabelValues(cur.Code).Inc()
		chargedMinor.WithLabelValues(cur.Code).Add(p.Amount.Shift(cur.MinorUnits).InexactFloat64())
	}
}

// Every currency's series exists from the start (at 0), so rate() and the
// dashboards see the first charge, and increase() the first failed report.
func init() {
	for _, c := range money.Codes() {
		chargesPosted.WithLabelValues(c)
		chargedMinor.WithLabelValues(c)
		segregatedFailures.WithLabelValues(c)
	}
}
