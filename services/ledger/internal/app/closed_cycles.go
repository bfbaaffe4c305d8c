package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// checkClosedCycles keeps a closed cycle's pending accounts closed (DESIGN
// §5). Once a cycle is closed its provider:{id}:pending:{cycle} balances are
// what settlement snapshots and settles, so after the close the only movement
// they take is their settlement: a debit that brings the balance to exactly
// zero. A credit (charges are routed to the earliest open cycle; a manual
// entry is refused, naming that cycle), a partial debit, or any reversal
// touching one is refused with a FailedPrecondition naming the cycle, so
// nothing can strand money in a settled cycle or leave it negative for good.
//
// It runs inside the write's Postgres transaction, after the postings, on the
// fresh transactions only (a replay of an earlier write still returns it).
// lockTouchedCycles took the touched cycles' lock shared before the postings,
// as posting charges does (cycle locks before balance rows, in one order), so
// a close waits for the write and a write never slips past a close.
//
// A group commit (single false) that touches a closed cycle's pending account
// returns errGroupRetry, so each such write is judged alone on its own balance.
func (a *App) checkClosedCycles(ctx context.Context, tx Tx, fresh []*domain.Transaction, changes []domain.BalanceChange, single bool) error {
	touched := touchedCycles(fresh)
	if len(touched) == 0 {
		return nil
	}
	closed, err := tx.ClosedCycles(ctx)
	if err != nil {
		return err
	}
	if !single {
		for _, c := range touched {
			if closed[c] {
				return errGroupRetry
			}
		}
		return nil
	}
	after := map[string]domain.BalanceChange{}
	for _, c := range changes {
		after[c.Account.Address+"|"+c.Currency] = c
	}
	for _, t := range fresh {
		for _, p := range t.Postings {
			cycle := p.Account.Cycle
			if cycle == "" || !closed[cycle] {
				continue
			}
			refuse := func(why string) error {
				return fmt.Errorf("%s: cycle %s is closed, %s (DESIGN §5): %w", p.Account.Address, cycle, why, apperr.ErrPrecondition)
			}
			switch {
			case t.Kind == domain.TxReversal:
				return refuse("a reversal may not touch its pending balances; post a correcting entry against an open cycle")
			case p.Direction == domain.Credit:
				cy, err := a.Calendar.Parse(cycle)
				if err != nil {
					return err
				}
				next := a.Calendar.Next(cy).ID
				for i := 0; closed[next] && i < cycleRedirectMax; i++ {
					n, err := a.Calendar.Parse(next)
					if err != nil {
						return err
					}
					next = a.Calendar.Next(n).ID
				}
				return refuse(fmt.Sprintf("it takes no more earnings; post them to %s, the earliest open cycle",
					domain.ProviderPendingAddr(p.Account.Party, next)))
			}
			if c, ok := after[p.Account.Address+"|"+p.Currency]; ok && !c.After.IsZero() {
				return refuse(fmt.Sprintf("its pending balance may only be settled in full (this leaves %s %s)", c.After, p.Currency))
			}
			if !settles(t, p.Account.Party, cycle) {
				return refuse("its pending balance is taken out by the provider's settlement alone; correct through an open cycle")
			}
		}
	}
	return nil
}

// settles: t is the settlement of provider's earnings in cycle, as
// settlement posts it (its metadata names the kind, the cycle and the
// provider; only the service identity may post that kind). A finance entry
// emptying a closed cycle's pending account left the cycle's snapshot
// unpayable: the provider's settlement was then refused for good and the
// cycle stayed closing.
func settles(t *domain.Transaction, provider, cycle string) bool {
	return t.Kind == domain.TxManual && t.Metadata["kind"] == "settlement" &&
		t.Metadata["cycle_id"] == cycle && t.Metadata["provider_id"] == provider
}

// lockTouchedCycles holds, until commit, the lock of every cycle whose
// provider pending account txs touch, shared (a close takes it exclusively).
func lockTouchedCycles(ctx context.Context, tx Tx, txs []*domain.Transaction) error {
	return tx.LockCyclesShared(ctx, touchedCycles(txs))
}

// touchedCycles are the cycles whose provider pending accounts txs move,
// in the order first met.
func touchedCycles(txs []*domain.Transaction) []string {
	var touched []string
	seen := map[string]bool{}
	for _, t := range txs {
		for _, p := range t.Postings {
			if c := p.Account.Cycle; c != "" && !seen[c] {
				seen[c] = true
				touched = append(touched, c)
			}
		}
	}
	return touched
}
