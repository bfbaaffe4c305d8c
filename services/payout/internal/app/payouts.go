package app

import (
	"log/slog"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Payouts holds payout's use cases: the steps of the payout workflow
// (Prepare, Submit, Follow; each safe to retry: the database change checks
// the status it starts from, ledger postings carry one idempotency key per
// payout, attempt and step, the rail is queried by reference before any
// submission), a payout created from a settlement, and finance's cancel and
// retry.
type Payouts struct {
	Store  Store
	Ledger Ledger
	// Entries reads the ledger transaction a payout settled outside names.
	Entries  LedgerEntries
	Rail     Rail
	Minimums domain.Minimums
	Clock    clock.Clock
	Log      *slog.Logger
}
