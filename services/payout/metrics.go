package payout

import "github.com/gpubill/gpubill/pkg/obs"

// Metrics implements svc.MetricsSource: payouts by status, read on scrape.
func (s *Service) Metrics() []obs.SQLMetric { return Metrics() }

// Metrics are the payout service's business metrics. A payout row per
// provider, cycle and currency: the group-by is bounded by the scrape's
// deadline (obs.SQLCollector).
func Metrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		Name: "gpubill_payouts", Type: obs.Gauge, Labels: []string{"status", "currency"},
		Help:  "Payouts by current status and currency (failed ones wait for an operator's retry or cancel).",
		Query: `select status, currency, count(*)::float8 from payout.payouts group by status, currency`,
	}}
}
