package payoutstack_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
)

// A payout queued on the bank-file rail for its cutoff when finance holds
// its provider: the hold answers it held (waiting), the cut leaves it out,
// its payout says it is held; a method change meanwhile is answered with
// the payout, which still goes to the old account; released, the next cut
// carries it. The hold answered 0 waiting, 0 in flight, and the 16:00 cut
// paid it during the dispute.
func TestPayoutHoldStopsAQueuedBankTransfer(t *testing.T) {
	t.Parallel()
	st, _ := bankStack(t)
	ctx := context.Background()
	const cyc = "cyc-20260101"
	st.setup(t, "ph-held", "6222000011110071")
	st.settle(t, "ph-held", cyc, "CNY", "620.00")
	po := st.waitStatus(t, "ph-held", cyc, "submitted", waitLong)

	hold, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "ph-held", Reason: "fraud dispute"})
	if err != nil || hold.PayoutsWaiting != 1 || hold.PayoutsInFlight != 0 {
		t.Fatalf("hold of a queued transfer: %v %v; want 1 waiting (held), 0 in flight", hold, err)
	}
	if id, built, err := st.s.TestHooks().CutBankBatch(ctx, time.Now()); err != nil || built || id != "" {
		t.Fatalf("the cut during the hold: %q %v %v; want nothing cut", id, built, err)
	}
	got := st.payouts(t, "ph-held")[0]
	if got.Status != "submitted" || !strings.HasPrefix(got.StatusReason, "held by finance: fraud dispute") {
		t.Fatalf("held payout reads %s %q", got.Status, got.StatusReason)
	}

	m, err := st.s.API().PutPayoutMethod(as(auth.RoleProvider, "ph-held"), &payoutv1.PutPayoutMethodRequest{ProviderId: "ph-held",
		Type: "bank", AccountName: "Provider ph-held", AccountNumber: "6222000011110072", BankCode: "ICBKCNBJ"})
	if err != nil || !slices.Equal(m.PayoutMethod.PayoutsToPreviousMethod, []string{po.PayoutId}) {
		t.Fatalf("method change: %v %v; want %s named (it still goes to the old account)", m, err, po.PayoutId)
	}
	got = st.payouts(t, "ph-held")[0]
	if last := got.StatusHistory[len(got.StatusHistory)-1].Note; !strings.Contains(last, "still goes to bank ****0071") {
		t.Errorf("history after the method change: %q", last)
	}

	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "ph-held"}); err != nil {
		t.Fatal(err)
	}
	id, built, err := st.s.TestHooks().CutBankBatch(ctx, time.Now().Add(time.Minute))
	if err != nil || !built {
		t.Fatalf("the cut after the release: %q %v %v", id, built, err)
	}
	hold, err = st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "ph-held", Reason: "again"})
	if err != nil || hold.PayoutsWaiting != 0 || hold.PayoutsInFlight != 1 {
		t.Fatalf("hold of a batched transfer: %v %v; want 0 waiting, 1 in flight", hold, err)
	}
}
