package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/money"
)

// sweepConflicts counts the commission sweeps the ledger refused as a
// conflict (the sweep key holds another body), by currency, each time a
// run meets one: the statement is not recorded as swept, its commission
// stays in bank:client, and every hourly run meets it again until someone
// resolves it (alert GpubillCommissionSweepConflict). Before, such a sweep
// failed the whole run, every hour, and the sweeps behind it waited too.
var sweepConflicts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_settlement_commission_sweep_conflicts_total",
	Help: "Commission sweeps the ledger refused because their idempotency key holds another transaction, by currency, " +
		"each run that met one (tried again each hour); the settlement log (commission sweep conflicts with the ledger) names each statement.",
}, []string{"currency"})

// Every currency's series exists from the start (at 0), so increase() sees
// the first conflict.
func init() {
	for _, c := range money.Codes() {
		sweepConflicts.WithLabelValues(c)
	}
}
