package pricing

import "github.com/gpubill/gpubill/pkg/obs"

// Metrics implements svc.MetricsSource: usage waiting for a rate card, read
// on scrape.
func (s *Service) Metrics() []obs.SQLMetric { return Metrics() }

// Metrics are the pricing service's business metrics: usage no rate card
// prices (no card in its currency at its start, or none with its GPU model)
// waits in pricing.pending_rating, uncharged, until a card prices it. It
// showed nowhere but that table: the renter not charged, the provider not
// credited, lease control blind to it.
func Metrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		// First: a page reads it, and a scrape's reads are bounded in all
		// (obs.SQLCollector; those past the bound vanish from the scrape).
		Name: "gpubill_usage_pending_rating_oldest_age_seconds", Type: obs.Gauge,
		Help:  "Age of the oldest usage event no rate card prices yet (0 when none waits).",
		Query: `select coalesce(extract(epoch from now() - min(created_at)), 0)::float8 from pricing.pending_rating`,
	}, {
		Name: "gpubill_usage_pending_rating", Type: obs.Gauge, Labels: []string{"currency", "gpu_model"},
		Help: "Usage events no rate card prices yet, by currency and GPU model: not charged until a card in force at their start " +
			"prices their model (they are rated then).",
		Query: `select currency, gpu_model, count(*)::float8 from pricing.pending_rating group by currency, gpu_model`,
	}}
}
