package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// ledgerRefusals counts the ledger's refusals of a payout's posting that
// retrying cannot be expected to cure (logged at ERROR): the submission
// while available covers it, and what the rail did (paid, failed,
// returned). Only the log said so: a payout paid at the rail and in
// in_transit for good showed nowhere on /metrics.
var ledgerRefusals = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_payout_ledger_refusals_total",
	Help: "Ledger refusals of a payout's posting while available covers it (step submitted) or of what its rail did " +
		"(paid, failed, returned; the money moved at the rail, the ledger behind it), each attempt; the payout log says which.",
}, []string{"step"})

// Every step's series exists from the start (at 0), so increase() sees the first.
func init() {
	for _, s := range []string{domain.StatusSubmitted, domain.StatusPaid, domain.StatusFailed, domain.StatusReturned} {
		ledgerRefusals.WithLabelValues(s)
	}
}
