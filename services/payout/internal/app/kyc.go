package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// kycRejectedBeforeRail is Submit's check, once the rail answered that it
// has never seen the payout's reference, that the provider's KYC was not
// rejected by finance since the payout passed the gate: rejected, the
// payout is not handed to the rail (stopKYCRejected). A rejection
// committed after this read answered the payout in flight
// (postgres.Store.PutKYC: created and submitting), and a bank transfer it
// queues is left out of every cut while the KYC stays rejected.
func (a *Payouts) kycRejectedBeforeRail(ctx context.Context, p domain.Payout) (bool, error) {
	kyc, err := a.Store.KYCStatus(ctx, p.ProviderID)
	if err != nil {
		return false, fmt.Errorf("payout %s: KYC of %s: %w", p.ID, p.ProviderID, err)
	}
	return kyc == domain.KYCRejected, nil
}

// stopKYCRejected fails p, past the gate and never handed to its rail
// (ref unknown to it), as kyc_rejected: the decision is recorded first
// (failure code kyc_rejected, the status unchanged), then the amount its
// submission moved to in_transit goes back to available (posted under the
// attempt's failed key, so a retry replays it), then the payout is
// recorded failed. A payout whose rail was down when finance rejected its
// provider (fraud, sanctions) was paid hours later once the rail
// recovered. Finance retries it once the KYC is verified again (its new
// attempt goes through the gate).
//
// Submit sends a payout already carrying the decision here without
// asking the KYC or the rail again: posted back to available and the
// process dying before the payout was recorded failed, the retry read the
// KYC verified again (finance changed it meanwhile) and handed the net to
// the rail while it also sat in available.
func (a *Payouts) stopKYCRejected(ctx context.Context, p domain.Payout, ref string) (string, error) {
	msg := fmt.Sprintf("the provider's KYC was rejected by finance before %s had %s: not sent", a.railOf(p), ref)
	if p.FailureCode != domain.FailKYCRejected {
		err := a.Store.Update(ctx, func(tx Tx) error {
			cur, err := lockUnmoved(ctx, tx, p)
			if err != nil {
				return err
			}
			cur.FailureCode, cur.FailureMessage = domain.FailKYCRejected, msg
			if err := tx.SetFailure(ctx, &cur, fmt.Sprintf("%s: %s; amount going back to available", domain.FailKYCRejected, msg), a.Clock.Now()); err != nil {
				return err
			}
			p = cur
			return nil
		})
		if err != nil {
			return "", err
		}
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
		cur.Submitting, cur.FailureCode, cur.FailureMessage = false, domain.FailKYCRejected, msg
		out = domain.StatusFailed
		return tx.Move(ctx, &cur, domain.StatusFailed, fmt.Sprintf("%s: %s; amount back in available", domain.FailKYCRejected, msg), a.Clock.Now())
	})
	if err != nil {
		return "", err
	}
	kycRejectedStops.Inc()
	a.Log.Warn("payout stopped before its rail: the provider's KYC is rejected", "payout_id", p.ID, "provider_id", p.ProviderID,
		"net", p.Net.String(), "currency", p.Currency, "reference", ref)
	return out, nil
}
