package app

import (
	"context"
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
	Entries LedgerEntries
	// SettledOutsideCheckLock lets one replica at a time run
	// CheckSettledOutside (none: every caller runs it).
	SettledOutsideCheckLock SessionLock
	Rail                    Rail
	Minimums                domain.Minimums
	Clock                   clock.Clock
	Log                     *slog.Logger
}

// railFor names the rail a payout of methodType is handed to ("" when the
// rail is not a router: the rail itself, asked as before).
func (a *Payouts) railFor(methodType string) string {
	if rr, ok := a.Rail.(RoutingRail); ok {
		return rr.RailFor(methodType)
	}
	return ""
}

// query asks the rail p's attempt was handed to about ref.
func (a *Payouts) query(ctx context.Context, p domain.Payout, ref string) (RailStatus, error) {
	if rr, ok := a.Rail.(RoutingRail); ok {
		return rr.QueryOn(ctx, p.SubmitRail, ref)
	}
	return a.Rail.Query(ctx, ref)
}

// submit hands t to the rail p's attempt was handed to.
func (a *Payouts) submit(ctx context.Context, p domain.Payout, t Transfer) (RailStatus, error) {
	if rr, ok := a.Rail.(RoutingRail); ok {
		return rr.SubmitTo(ctx, p.SubmitRail, t)
	}
	return a.Rail.Submit(ctx, t)
}

// railOf names the rail p's attempt was handed to, for errors and logs
// (the router's own name is its default rail's: a bank payout's error named
// the sandbox).
func (a *Payouts) railOf(p domain.Payout) string {
	if p.SubmitRail != "" {
		return p.SubmitRail
	}
	return a.Rail.Name()
}
