package payoutstack_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
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
	if id, built, err := cutOne(st.s.TestHooks().CutBankBatch(ctx, time.Now())); err != nil || built || id != "" {
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
	id, built, err := cutOne(st.s.TestHooks().CutBankBatch(ctx, time.Now().Add(time.Minute)))
	if err != nil || !built {
		t.Fatalf("the cut after the release: %q %v %v", id, built, err)
	}
	hold, err = st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "ph-held", Reason: "again"})
	if err != nil || hold.PayoutsWaiting != 0 || hold.PayoutsInFlight != 1 {
		t.Fatalf("hold of a batched transfer: %v %v; want 0 waiting, 1 in flight", hold, err)
	}
}

// Finance cancels payouts whose bank transfers wait in the bank-file
// queue, one held, one waiting for its cutoff: nothing was sent to the
// bank, so each transfer leaves the queue, its payout is canceled with a
// history row, and its money is back in the provider's available, posted
// once however often the cancel is sent (its workflow, woken, posts the
// same key). The next cut carries only the payout not canceled, which,
// once in a bank file, cannot be canceled. The cancel was refused (400
// "submitted: only a payout not yet submitted can be canceled"), and the
// held payout showed the date of the cutoff after its queuing all through
// the hold.
func TestCancelOfAQueuedBankTransfer(t *testing.T) {
	t.Parallel()
	st, _ := bankStack(t)
	ctx := context.Background()
	const cyc = "cyc-20260101"
	for i, p := range []string{"pc-held", "pc-free", "pc-cut"} {
		st.setup(t, p, fmt.Sprintf("622200001111008%d", i))
	}
	st.settle(t, "pc-held", cyc, "CNY", "620.00")
	st.settle(t, "pc-free", cyc, "CNY", "300.00")
	st.settle(t, "pc-cut", cyc, "CNY", "150.00")
	held := st.waitStatus(t, "pc-held", cyc, "submitted", waitLong)
	free := st.waitStatus(t, "pc-free", cyc, "submitted", waitLong)
	cut := st.waitStatus(t, "pc-cut", cyc, "submitted", waitLong)
	if held.ExpectedArrivalDate == "" {
		t.Fatal("queued payout without an expected arrival")
	}
	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "pc-held", Reason: "fraud dispute"}); err != nil {
		t.Fatal(err)
	}
	if got := st.payouts(t, "pc-held")[0]; got.ExpectedArrivalDate != "" {
		t.Errorf("held queued payout: expected arrival %s; want none while held", got.ExpectedArrivalDate)
	}

	for _, p := range []*payoutv1.Payout{held, held, free} {
		c, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: p.PayoutId, Reason: "fraud confirmed"})
		if err != nil || c.Payout.Status != "canceled" {
			t.Fatalf("cancel of queued %s: %v %v; want canceled", p.PayoutId, c, err)
		}
		last := c.Payout.StatusHistory[len(c.Payout.StatusHistory)-1]
		if last.Status != "canceled" || !strings.HasPrefix(last.Note, "canceled by finance: fraud confirmed") ||
			!strings.Contains(last.Note, "amount back in available") {
			t.Errorf("canceled queued payout's last history row: %s %q", last.Status, last.Note)
		}
	}
	st.checkProvider(t, "pc-held", "CNY", "620.00", "0")
	st.checkProvider(t, "pc-free", "CNY", "300.00", "0")
	for _, p := range []*payoutv1.Payout{held, free} {
		testkit.Eventually(t, waitLong, func() bool {
			desc, err := st.tc.DescribeWorkflowExecution(ctx, st.s.WorkflowID(p.PayoutId), "")
			return err == nil && desc.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
		}, "the canceled payout's workflow completed")
	}
	txs, err := st.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: ids.ProviderAvailable("pc-held")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	returned := 0
	for _, tx := range txs.Transactions {
		keys = append(keys, tx.IdempotencyKey)
		if tx.IdempotencyKey == "payout-"+held.PayoutId+"-1-canceled" {
			returned++
		}
	}
	if returned != 1 {
		t.Errorf("pc-held's available: transactions %q; want payout-%s-1-canceled once", keys, held.PayoutId)
	}
	st.checkProvider(t, "pc-held", "CNY", "620.00", "0")

	id, built, err := cutOne(st.s.TestHooks().CutBankBatch(ctx, time.Now()))
	if err != nil || !built {
		t.Fatalf("the cut: %q %v %v", id, built, err)
	}
	if b, err := st.s.API().GetPayoutBatch(fin, &payoutv1.GetPayoutBatchRequest{BatchId: id}); err != nil || b.Batch.Transfers != 1 || b.Batch.ControlSum != "150.00" {
		t.Fatalf("batch %s: %v %v; want pc-cut's 150.00 alone", id, b, err)
	}
	if _, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: cut.PayoutId}); status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition {
		t.Errorf("cancel of a payout in a bank file: %v; want FailedPrecondition", err)
	}
	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "pc-held"}); err != nil {
		t.Fatal(err)
	}
	if id, built, err := cutOne(st.s.TestHooks().CutBankBatch(ctx, time.Now().Add(time.Minute))); err != nil || built {
		t.Fatalf("the cut after the release: %q %v %v; want nothing (the held transfer was canceled)", id, built, err)
	}
	st.checkProvider(t, "pc-cut", "CNY", "0", "150.00")
}

// A cancel of a queued bank transfer whose return to available the
// ledger does not take (down at that moment: the cancel is saved, the
// call answers 503) wakes the payout's workflow as a cancel that posted
// does, and the workflow posts the return as soon as the ledger answers.
// Not woken, the return waited for the workflow's next rail poll, up to
// GPUBILL_PAYOUT_POLL_MAX (30 min; an hour here, so that only a wake
// posts it within the test).
func TestCancelOfAQueuedBankTransferWhoseReturnFailedWakesItsWorkflow(t *testing.T) {
	t.Parallel()
	const pollEvery = time.Hour
	timing := testTiming
	timing.PollFirst, timing.PollMax = pollEvery, pollEvery
	st := newStack(t, payout.Config{BankRail: payout.BankRailFile, Bank: payout.BankConfig{Debtor: clientAccount, CutoffHour: 14,
		OutboxDir: t.TempDir(), InboxDir: t.TempDir(), Tick: 100 * time.Millisecond}, Timing: timing})
	st.stopPayout()
	down := &returnFailsOnce{}
	st.s.TestHooks().ReplaceLedger(func(l payout.Ledger) payout.Ledger { down.Ledger = l; return down })
	st.startPayout()
	const cyc = "cyc-20260101"
	st.setup(t, "pc-down", "6222000011110091")
	st.settle(t, "pc-down", cyc, "CNY", "620.00")
	po := st.waitStatus(t, "pc-down", cyc, "submitted", waitLong)
	st.checkProvider(t, "pc-down", "CNY", "0", "620.00")

	canceledAt := time.Now()
	_, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: po.PayoutId, Reason: "fraud confirmed"})
	if down.failed.Load() != 1 || status.Code(apperr.ToStatus(err)) != codes.Unavailable {
		t.Fatalf("cancel with the ledger down: %v (returns refused %d); want Unavailable, the return refused once", err, down.failed.Load())
	}
	if got := st.payouts(t, "pc-down")[0]; got.Status != "canceled" {
		t.Fatalf("pc-down after the cancel: %s, want canceled (saved before the ledger was called)", got.Status)
	}
	testkit.Eventually(t, waitLong, func() bool {
		return st.balance(t, "provider:pc-down:available", "CNY").Equal(decimal.RequireFromString("620.00"))
	}, "the canceled payout's return posted by its workflow, woken")
	took := time.Since(canceledAt)
	t.Logf("the return posted within %s of the cancel", took.Round(time.Millisecond))
	if took >= pollEvery/2 {
		t.Errorf("the return posted %s after the cancel; want well before the workflow's poll (%s)", took, pollEvery)
	}
	st.checkProvider(t, "pc-down", "CNY", "620.00", "0")
}

// returnFailsOnce is the ledger, down for the first return to available of
// a payout canceled in the bank-file queue.
type returnFailsOnce struct {
	payout.Ledger
	failed atomic.Int32
}

func (l *returnFailsOnce) Transfer(ctx context.Context, t payout.LedgerTransfer) error {
	if strings.HasSuffix(t.Key, "-canceled") && l.failed.CompareAndSwap(0, 1) {
		return &apperr.Downstream{Err: status.Error(codes.Unavailable, "ledger down (test)")}
	}
	return l.Ledger.Transfer(ctx, t)
}
