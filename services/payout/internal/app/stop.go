package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// unsent is why an attempt past the gate is failed before any rail paid
// it (stopUnsent).
type unsent struct {
	code, msg string
	// ref is the attempt's rail reference and methodSum the method it was
	// for; recorded on the payout when its rail refused ref (refused), not
	// when no rail was asked (the provider's KYC rejected).
	ref, methodSum string
	refused        bool
}

// recordedStop is the stop p carries: a created payout carries a failure
// code only when stopUnsent recorded it (Retry clears it with the attempt;
// a rail_amount_mismatch on a created payout moves it to submitted in the
// same transaction).
func recordedStop(p domain.Payout, ref, methodSum string) (unsent, bool) {
	if p.Status != domain.StatusCreated || p.FailureCode == "" {
		return unsent{}, false
	}
	return unsent{code: p.FailureCode, msg: p.FailureMessage, ref: ref, methodSum: methodSum,
		refused: p.FailureCode != domain.FailKYCRejected}, true
}

// stopUnsent fails p, created and past the gate, whose attempt no rail
// pays: its rail refused its reference at once (a currency or a payee it
// cannot pay, the strict router with no rail for the method's type, a
// platform's definite refusal), or it was never handed to its rail (the
// provider's KYC rejected: stopKYCRejected). The decision is recorded first
// (failure code and message under the payout's lock, the status unchanged,
// a history row), then the amount its submission moved to in_transit goes
// back to available (posted under the attempt's failed key, so a retry
// replays it), then the payout is recorded failed.
//
// Submit sends a payout already carrying the decision here without asking
// the KYC or the rail again (recordedStop). Posted back to available and
// the process dying (or the ledger failing the posting) before the payout
// was recorded failed: the KYC stop's retry read the KYC verified again
// and handed the net to the rail while it also sat in available; a rail's
// refusal, recorded submitted before its posting, was followed on a rail
// that never had its reference (Alipay and WeChat Pay keep no order they
// refuse before calling the platform; the strict router asks none): each
// Follow failed on "unknown reference" and was tried again for good, the
// payout submitted, its net in available or still in in_transit, never
// failed, never retryable.
func (a *Payouts) stopUnsent(ctx context.Context, p domain.Payout, s unsent) (string, error) {
	if p.FailureCode == "" {
		err := a.Store.Update(ctx, func(tx Tx) error {
			cur, err := lockUnmoved(ctx, tx, p)
			if err != nil {
				return err
			}
			if cur.FailureCode == "" {
				cur.FailureCode, cur.FailureMessage = s.code, s.msg
				if err := tx.SetFailure(ctx, &cur, fmt.Sprintf("%s: %s; amount going back to available", s.code, s.msg), a.Clock.Now()); err != nil {
					return err
				}
			}
			p = cur
			return nil
		})
		if err != nil {
			return "", err
		}
		// Recorded meanwhile by another run of Submit: that decision is the one.
		s.code, s.msg = p.FailureCode, p.FailureMessage
	}
	if err := a.post(ctx, p, domain.StatusFailed); err != nil {
		return "", a.railDid(p, domain.StatusFailed, err)
	}
	out := ""
	err := a.Store.Update(ctx, func(tx Tx) error {
		cur, err := lockUnmoved(ctx, tx, p)
		if err != nil {
			return err
		}
		cur.Submitting, cur.FailureCode, cur.FailureMessage = false, s.code, s.msg
		if s.refused {
			cur.RailRef, cur.MethodSum = s.ref, s.methodSum
		}
		out = domain.StatusFailed
		return tx.Move(ctx, &cur, domain.StatusFailed, fmt.Sprintf("%s: %s; amount back in available", s.code, s.msg), a.Clock.Now())
	})
	if err != nil {
		return "", err
	}
	if s.code == domain.FailKYCRejected {
		kycRejectedStops.Inc()
		a.Log.Warn("payout stopped before its rail: the provider's KYC is rejected", "payout_id", p.ID, "provider_id", p.ProviderID,
			"net", p.Net.String(), "currency", p.Currency, "reference", s.ref)
	} else {
		a.Log.Warn("payout refused at once by its rail: failed, its net back in available", "payout_id", p.ID, "provider_id", p.ProviderID,
			"rail", a.railOf(p), "reference", s.ref, "failure_code", s.code, "net", p.Net.String(), "currency", p.Currency)
	}
	return out, nil
}
