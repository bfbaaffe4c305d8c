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
//
// The window left is this read (no lock: the rail call cannot be in the
// transaction) to the rail taking the transfer: an Alipay or WeChat Pay
// payout whose provider finance rejects then is paid, and finance's
// answer names it in flight. Read under the payout's lock, or the KYC row
// locked FOR SHARE, in a transaction committed before the call, leaves
// the same window; held across the call, a rejection only waits for the
// platform's answer (up to its client's timeout) and is answered the same,
// the payout paid all the same, while PutKYC's locks (the bank queue, the
// KYC row, then the payouts) meet the bank-file rail's own transaction.
func (a *Payouts) kycRejectedBeforeRail(ctx context.Context, p domain.Payout) (bool, error) {
	kyc, err := a.Store.KYCStatus(ctx, p.ProviderID)
	if err != nil {
		return false, fmt.Errorf("payout %s: KYC of %s: %w", p.ID, p.ProviderID, err)
	}
	return kyc == domain.KYCRejected, nil
}

// stopKYCRejected fails p, past the gate and never handed to its rail
// (ref unknown to it), as kyc_rejected (stopUnsent: recorded before its
// posting). A payout whose rail was down when finance rejected its
// provider (fraud, sanctions) was paid hours later once the rail
// recovered. Finance retries it once the KYC is verified again (its new
// attempt goes through the gate).
func (a *Payouts) stopKYCRejected(ctx context.Context, p domain.Payout, ref string) (string, error) {
	msg := fmt.Sprintf("the provider's KYC was rejected by finance before %s had %s: not sent", a.railOf(p), ref)
	return a.stopUnsent(ctx, p, unsent{code: domain.FailKYCRejected, msg: msg, ref: ref})
}
