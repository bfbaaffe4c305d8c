package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/money"
)

// sweepConflicts counts the commission sweeps the ledger refused as a
// conflict (the sweep key holds another body), by currency, each time a
// run or a provider's own settlement meets one: the statement is not
// recorded as swept, its commission stays in bank:client, and every hourly
// run meets it again until someone resolves it (alert
// GpubillCommissionSweepConflict). Before, such a sweep failed the whole
// run, every hour, and the sweeps behind it waited too; met by a
// provider's settlement, it failed the provider's settlement.
var sweepConflicts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_settlement_commission_sweep_conflicts_total",
	Help: "Commission sweeps the ledger refused because their idempotency key holds another transaction, by currency, " +
		"each run or provider settlement that met one (tried again each hour); the settlement log (commission sweep conflicts with the ledger) names each statement.",
}, []string{"currency"})

// sweepRefused counts the commission sweeps refused for any reason but
// bank:client's funding (Deferred) or a Conflict, by currency and code (the
// ledger's gRPC code: InvalidArgument on another field or account,
// PermissionDenied, NotFound, FailedPrecondition; UnknownCurrency for a
// currency settlement does not know), each time a run meets one: the
// statement stays unswept, its commission in bank:client, and no later
// run fixes it by itself (alert GpubillCommissionSweepRefused). Such a
// sweep once counted as deferred, read as bank:client short.
var sweepRefused = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_settlement_commission_sweep_refused_total",
	Help: "Commission sweeps the ledger refused for a reason other than bank:client funding or a key conflict, by currency and code " +
		"(the ledger's gRPC code, or UnknownCurrency), each run that met one (tried again each hour); the settlement log " +
		"(commission sweep refused by the ledger) names each statement and the ledger's message.",
}, []string{"currency", "code"})

// RefusedUnknownCurrency is the code of a sweep refused before the ledger
// is asked: its statement's currency is not one settlement knows.
const RefusedUnknownCurrency = "UnknownCurrency"

// Every currency's series exists from the start (at 0), so increase() sees
// the first conflict or refusal.
func init() {
	for _, c := range money.Codes() {
		sweepConflicts.WithLabelValues(c)
		for _, code := range []string{"InvalidArgument", "FailedPrecondition", "PermissionDenied", "NotFound"} {
			sweepRefused.WithLabelValues(c, code)
		}
	}
}
