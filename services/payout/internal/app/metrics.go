package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// ledgerRefusals counts the ledger's refusals of a payout's posting that the
// service logs at ERROR: the submission while available covers it (the
// payout waits at the gate) and what the rail did (paid, failed, returned;
// posted again with backoff), and the return to available of a payout
// canceled in the bank-file queue. Only the log said so: a payout paid at the
// rail and held in in_transit by the refusals showed nowhere on /metrics.
var ledgerRefusals = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_payout_ledger_refusals_total",
	Help: "Ledger refusals of a payout's posting while available covers it (step submitted) or of what its rail did " +
		"(paid, failed, returned; the money moved at the rail, the ledger behind it) or of a cancel in the bank-file queue (canceled), " +
		"each attempt; the payout log says which.",
}, []string{"step"})

// railAmountMismatches counts the payouts a rail holds the reference of at
// another amount than their net (rail_amount_mismatch: made again after a
// restore at another net), each once: they stop submitted for finance.
var railAmountMismatches = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_payout_rail_amount_mismatches_total",
	Help: "Payouts whose rail holds their reference at another amount than their net (made again after a restore or a recovery " +
		"at another net): neither recorded paid nor sent again, they stay submitted with failure_code rail_amount_mismatch for finance.",
}, []string{"rail"})

// kycRejectedStops counts the payouts stopped before their rail as
// kyc_rejected (stopKYCRejected), each once, after the commit: finance
// rejected the provider (fraud, sanctions) while the payout was past the
// gate, and it would have been paid. Only a WARN line said so; failed,
// it read as any other failed payout (gpubill_payouts).
var kycRejectedStops = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_payout_kyc_rejected_total",
	Help: "Payouts past the gate stopped before their rail because finance rejected their provider's KYC (failed kyc_rejected, " +
		"their net back in available); the payout log (payout stopped before its rail) names each.",
})

// settledOutsideCheckFailures counts what the periodic settled-outside
// check (CheckSettledOutside) failed at, by step: claims (the claims not
// listed, the check's lock not taken, or no ledger reader), read (a
// claimed ledger transaction not read, each claim: a failed call counts
// every claim it named) and move (a payout whose entry was reversed not
// moved back to failed). Only an ERROR line said so: a payout whose hand payment
// was reversed read paid forever, unseen.
var settledOutsideCheckFailures = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_payout_settled_outside_check_failures_total",
	Help: "Failures of the periodic check of the ledger transactions claimed by payouts settled outside, by step: claims (the claims " +
		"not listed, or the check's lock not taken), read (a claimed transaction not read from the ledger, each claim), move (a payout whose transaction was reversed " +
		"not moved back to failed); the payout log (settled-outside check) names each.",
}, []string{"step"})

// settledOutsideCheckSteps are the steps settledOutsideCheckFailures counts.
var settledOutsideCheckSteps = []string{"claims", "read", "move"}

// RailAmountMismatches is the counter of one rail: the composition root
// makes each rail's series at 0 (a first increase from nothing is no
// increase to Prometheus).
func RailAmountMismatches(rail string) prometheus.Counter {
	return railAmountMismatches.WithLabelValues(rail)
}

// Every step's series exists from the start (at 0), so increase() sees the first.
func init() {
	for _, s := range []string{domain.StatusSubmitted, domain.StatusPaid, domain.StatusFailed, domain.StatusReturned, domain.StatusCanceled} {
		ledgerRefusals.WithLabelValues(s)
	}
	for _, s := range settledOutsideCheckSteps {
		settledOutsideCheckFailures.WithLabelValues(s)
	}
}
