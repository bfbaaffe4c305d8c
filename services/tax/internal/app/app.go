// Package app holds the tax service's use cases: computing and recording a
// withholding (one file per use case), and remitting a month's withholdings
// (tax periods: calendar months in the configured zone, pkg/taxperiod).
package app

import (
	"log/slog"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// DefaultJurisdiction applies to providers whose party record names none.
const DefaultJurisdiction = domain.DefaultJurisdiction

// App wires the use cases.
type App struct {
	Log        *slog.Logger
	Store      Store
	Ledger     Ledger
	Clock      clock.Clock
	Calendar   cycles.Calendar
	TaxPeriods taxperiod.Calendar // months remitted by RemitTax
}
