package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Submit moves the payout's amount from available to in_transit in the
// ledger, then hands it to the rail under its reference: the rail is
// queried first, and only a reference the rail has never seen is
// submitted, so a retry after an unknown result (timeout, outage, a
// worker killed mid-call) never pays twice.
func (a *Payouts) Submit(ctx context.Context, id string) (string, error) {
	p, err := a.Store.GetPayout(ctx, id)
	if err != nil {
		return "", notFoundPermanent(err)
	}
	if p.Status != domain.StatusCreated {
		return p.Status, nil
	}
	if !p.Submitting {
		return "", Permanent(fmt.Errorf("payout %s: submit before the gate passed", id))
	}
	m, err := a.Store.GetMethod(ctx, p.ProviderID)
	if err != nil {
		return "", err
	}
	// Available must still cover the payout (Prepare checked it): the
	// ledger refuses atomically to overdraw a provider account but by a
	// reversal (a replay of this attempt's posting is answered, not
	// checked, so a retry after the posting goes on). Refused and not
	// covered, the payout goes back to wait at the gate, never reaching
	// the rail.
	if err := a.post(ctx, p, domain.StatusSubmitted); err != nil {
		if !errors.Is(err, ErrLedgerRefused) {
			return "", err
		}
		available, aerr := a.Ledger.Available(ctx, p.ProviderID, p.Currency)
		if aerr != nil {
			return "", aerr
		}
		if available.LessThan(p.Net) {
			return a.uncovered(ctx, p, available)
		}
		// Covered now (a credit landed after the refusal, or a payout
		// that held available was canceled): tried again, not given up;
		// given up, the payout stayed created and submitting, which no
		// operation moves.
		return "", fmt.Errorf("payout %s: the ledger refused moving %s %s to in_transit, but available (%s) covers it now: try again (%v)",
			id, p.Net, p.Currency, available, err)
	}
	ref := domain.RailReference(p.ID, p.Attempt)
	rs, err := a.Rail.Query(ctx, ref)
	if errors.Is(err, ErrUnknownReference) {
		rs, err = a.Rail.Submit(ctx, Transfer{Reference: ref, ProviderID: p.ProviderID, Currency: p.Currency, Amount: p.Net, Method: m.Method})
	}
	if err != nil {
		// The outcome is unknown: the retry queries the same reference.
		return "", fmt.Errorf("rail %s, payout %s: %w", a.Rail.Name(), id, err)
	}
	p.RailRef, p.MethodSum = ref, m.Summary()
	return a.advance(ctx, p, rs)
}

// uncovered moves a created payout that available no longer covers back
// to action_required (insufficient_available), no longer marked for
// submission; its workflow waits at the gate again.
func (a *Payouts) uncovered(ctx context.Context, p domain.Payout, available decimal.Decimal) (string, error) {
	out := ""
	err := a.Store.Update(ctx, func(tx Tx) error {
		cur, err := tx.Lock(ctx, p.ID)
		if err != nil {
			return err
		}
		out = cur.Status
		if cur.Status != domain.StatusCreated || cur.Attempt != p.Attempt {
			return nil
		}
		cur.Submitting = false
		out = domain.StatusActionRequired
		return tx.Move(ctx, &cur, domain.StatusActionRequired, domain.InsufficientAvailableReason(available, cur.Net, cur.Currency), a.Clock.Now())
	})
	if err != nil {
		return "", err
	}
	a.Log.Warn("payout not covered by available: waits", "payout_id", p.ID, "provider_id", p.ProviderID,
		"available", available.String(), "net", p.Net.String(), "currency", p.Currency)
	return out, nil
}

// post writes the ledger movement that enters status to (DESIGN §4).
func (a *Payouts) post(ctx context.Context, p domain.Payout, to string) error {
	mv, ok := domain.MovementFor(p.ProviderID, to)
	if !ok {
		return nil
	}
	cur, err := money.Lookup(p.Currency)
	if err != nil {
		return Permanent(fmt.Errorf("payout %s: %w", p.ID, err))
	}
	err = a.Ledger.Transfer(ctx, domain.LedgerTransfer{
		Key:         domain.LedgerKey(p.ID, p.Attempt, to),
		Description: fmt.Sprintf("payout %s %s", p.ID, to),
		Metadata:    map[string]string{"kind": "payout", "payout_id": p.ID, "provider_id": p.ProviderID, "step": to},
		Movement:    mv, Currency: cur.Code, Amount: p.Net,
	})
	if err != nil {
		return fmt.Errorf("ledger %s of payout %s: %w", to, p.ID, err)
	}
	return nil
}
