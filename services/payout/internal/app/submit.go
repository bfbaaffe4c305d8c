package app

import (
	"context"
	"errors"
	"fmt"

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
	if st, waits, err := a.postSubmission(ctx, p); err != nil || waits {
		return st, err
	}
	ref := domain.RailReference(p.ID, p.Attempt)
	if s, ok := recordedStop(p, ref, m.Summary()); ok {
		// Stopped already, not yet recorded failed (stopUnsent): neither
		// the KYC nor the rail is asked again.
		return a.stopUnsent(ctx, p, s)
	}
	// Only the rail the gate handed the attempt to is asked, and given it.
	rs, err := a.query(ctx, p, ref)
	if errors.Is(err, ErrUnknownReference) {
		rejected, kerr := a.kycRejectedBeforeRail(ctx, p)
		if kerr != nil {
			return "", kerr
		}
		if rejected {
			return a.stopKYCRejected(ctx, p, ref)
		}
		rs, err = a.submit(ctx, p, Transfer{Reference: ref, ProviderID: p.ProviderID, Currency: p.Currency, Amount: p.Net, Method: m.Method})
		if err == nil && rs.State == RailFailed && rs.FailureCode != "" {
			// Refused at once, perhaps kept by no rail (asked again, none
			// knows ref): recorded before its posting (a refusal without a
			// code, which recordedStop could not tell, is advanced as
			// before).
			return a.stopUnsent(ctx, p, unsent{code: rs.FailureCode, msg: rs.Message, ref: ref, methodSum: m.Summary(), refused: true})
		}
	}
	if err != nil {
		// The outcome is unknown: the retry queries the same reference.
		return "", fmt.Errorf("rail %s, payout %s: %w", a.railOf(p), id, err)
	}
	p.RailRef, p.MethodSum = ref, m.Summary()
	return a.advance(ctx, p, rs)
}

// postSubmission moves the payout's amount from available to in_transit in
// the ledger; waits is true when the payout went back to the gate instead
// (status: where it now stands).
//
// Available must still cover the payout (Prepare checked it): the ledger
// refuses atomically to overdraw a provider account but by a reversal (a
// replay of this attempt's posting is answered, not checked, so a retry
// after the posting goes on). Refused, the payout goes back to wait at the
// gate, never reaching the rail.
func (a *Payouts) postSubmission(ctx context.Context, p domain.Payout) (status string, waits bool, err error) {
	err = a.post(ctx, p, domain.StatusSubmitted)
	switch {
	case err == nil:
		return "", false, nil
	case errors.Is(err, ErrPermanent) && !errors.Is(err, ErrLedgerRefused):
		// Refused for a cause a retry of the call does not change (the
		// ledger's guard refusing this service's identity, the key taken
		// by another body): the payout waits at the gate, which re-checks
		// it, and the refusal is counted. It failed the workflow: the
		// payout created and submitting for good, neither cancelable nor
		// retryable, its net in available.
		ledgerRefusals.WithLabelValues(domain.StatusSubmitted).Inc()
		a.Log.Error("payout submission refused by the ledger: waits at the gate", "payout_id", p.ID,
			"provider_id", p.ProviderID, "net", p.Net.String(), "currency", p.Currency, "err", err)
		return a.waitAtGate(ctx, p, domain.LedgerRefusedReason)
	case !errors.Is(err, ErrLedgerRefused):
		return "", false, err
	}
	available, err := a.Ledger.Available(ctx, p.ProviderID, p.Currency)
	if err != nil {
		return "", false, err
	}
	if available.LessThan(p.Net) {
		return a.waitAtGate(ctx, p, domain.InsufficientAvailableReason(available, p.Net, p.Currency))
	}
	// Covered now: a credit landed after the refusal, or a payout that held
	// available was canceled; posted again at once. Refused again, the
	// ledger refuses it for another reason: the payout waits at the gate,
	// re-checked there. (The ledger's answer is in the log, not in the
	// reason the provider reads. Tried again without end, the payout stayed
	// created and submitting, seen only in the activity's retries; refused
	// for good otherwise, as above, it failed the workflow.)
	err = a.post(ctx, p, domain.StatusSubmitted)
	switch {
	case err == nil:
		return "", false, nil
	case !errors.Is(err, ErrLedgerRefused) && !errors.Is(err, ErrPermanent):
		return "", false, err
	}
	ledgerRefusals.WithLabelValues(domain.StatusSubmitted).Inc()
	a.Log.Error("payout refused by the ledger while available covers it: waits at the gate", "payout_id", p.ID,
		"provider_id", p.ProviderID, "available", available.String(), "net", p.Net.String(), "currency", p.Currency, "err", err)
	return a.waitAtGate(ctx, p, domain.LedgerRefusedReason)
}

// waitAtGate is backToGate for postSubmission.
func (a *Payouts) waitAtGate(ctx context.Context, p domain.Payout, reason string) (string, bool, error) {
	st, err := a.backToGate(ctx, p, reason)
	return st, true, err
}

// backToGate moves a created payout the ledger refused to move to
// in_transit back to action_required with reason, no longer marked for
// submission; its workflow waits at the gate again, which re-checks it.
func (a *Payouts) backToGate(ctx context.Context, p domain.Payout, reason string) (string, error) {
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
		// Unmarked, so the gate records the rail again (marked again with
		// the rail it had, the rail was taken for one left by a replica
		// of an earlier version and cleared: migration payout/0030).
		cur.Submitting, cur.SubmitRail = false, ""
		out = domain.StatusActionRequired
		return tx.Move(ctx, &cur, domain.StatusActionRequired, reason, a.Clock.Now())
	})
	if err != nil {
		return "", err
	}
	a.Log.Warn("payout refused by the ledger: waits at the gate", "payout_id", p.ID, "provider_id", p.ProviderID,
		"net", p.Net.String(), "currency", p.Currency, "reason", reason)
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
