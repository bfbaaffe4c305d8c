package payoutstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

// A payout never drives provider:{id}:available negative: after finance
// reverses part of what the provider earned, the payout waits in
// action_required (insufficient_available) and nothing reaches the rail;
// once a manual transaction brings available back to cover it, it goes on
// by itself (the credit wakes it) and is paid, every balance exact.
func TestPayoutWaitsForAvailable(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{}) // the gate's re-check is an hour: the credit wakes the payout
	ctx := context.Background()
	const prov, cyc, renter = "p-rev", "cyc-20260101", "r-p-rev"

	// 100.00 earlier and 200.00 settled for the cycle: available 300.00,
	// the payout 200.00, waiting for KYC and a method.
	st.settleLedgerOnly(t, prov, "cyc-20251201", "CNY", "100.00")
	st.settle(t, prov, cyc, "CNY", "200.00")
	p := st.waitStatus(t, prov, cyc, "action_required", waitLong)
	if p.Net != "200.00" {
		t.Fatalf("payout net %s", p.Net)
	}

	// Finance reverses the cycle's settlement posting: 100.00 left in
	// available, short of the 200.00 payout.
	txs, err := st.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: ids.ProviderAvailable(prov)})
	if err != nil {
		t.Fatal(err)
	}
	settled := ""
	for _, tx := range txs.Transactions {
		if tx.IdempotencyKey == "settle-"+prov+"-"+cyc {
			settled = tx.TransactionId
		}
	}
	if _, err := st.ledger.ReverseTransaction(ctx, &ledgerv1.ReverseTransactionRequest{TransactionId: settled,
		IdempotencyKey: "rev-" + prov, Description: "settled in error"}); err != nil {
		t.Fatalf("reverse %q: %v", settled, err)
	}
	st.checkProvider(t, prov, "CNY", "100.00", "0")

	// KYC and method set: the gate would pass, but available does not cover it.
	st.setup(t, prov, "6222000011117771")
	testkit.Eventually(t, waitLong, func() bool {
		ps := st.payouts(t, prov)
		return len(ps) == 1 && ps[0].Status == "action_required" && strings.HasPrefix(ps[0].StatusReason, "insufficient_available")
	}, "payout waits for available")
	p = st.waitStatus(t, prov, cyc, "action_required", time.Second)
	if !strings.HasPrefix(p.StatusReason, "insufficient_available") || strings.Contains(history(p), "submitted") {
		t.Fatalf("uncovered payout: %s (%s) %s", p.Status, p.StatusReason, history(p))
	}
	if n := st.submissions(t, p.PayoutId); n != 0 {
		t.Fatalf("uncovered payout reached the rail %d times", n)
	}
	st.checkProvider(t, prov, "CNY", "100.00", "0")

	// A manual transaction takes 100.00 back from the renter's wallet:
	// available covers the payout again; it is paid by itself.
	if _, err := st.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: "topup-" + prov, Description: "re-credit after review",
		Postings: []*ledgerv1.Posting{
			{Account: "renter:" + renter + ":wallet", Direction: "debit", Amount: "100.00", Currency: "CNY"},
			{Account: ids.ProviderAvailable(prov), Direction: "credit", Amount: "100.00", Currency: "CNY"},
		}}); err != nil {
		t.Fatal(err)
	}
	p = st.waitStatus(t, prov, cyc, "paid", waitLong)
	if h := history(p); !strings.HasSuffix(h, "created>submitted>in_transit>paid") {
		t.Errorf("history %s", h)
	}
	if n := st.submissions(t, p.PayoutId); n != 1 {
		t.Errorf("submitted %d times", n)
	}
	st.checkProvider(t, prov, "CNY", "0", "0")
	// 300.00 deposited, 200.00 paid out; the renter keeps the 100.00 the
	// reversal gave back and the manual transaction did not take.
	if w := st.balance(t, "renter:"+renter+":wallet", "CNY"); !w.Equal(decimal.RequireFromString("100.00")) {
		t.Errorf("renter wallet %s, want 100.00", w)
	}
	if b := st.balance(t, "bank:client", "CNY"); !b.Equal(decimal.RequireFromString("100.00")) {
		t.Errorf("bank:client %s, want 300.00 deposited - 200.00 paid", b)
	}
}

// A payout available no longer covers (finance reversed part of it) does
// not join the next settlement's payout: joined, the new payout carried the
// old one's shortfall (100.00 against 70.00: 300.00 against 270.00) and
// waited too, the new cycle's money held back with it, settlement after
// settlement. The next cycle's payout is paid alone; the short one waits
// on for a credit that covers it.
func TestShortPayoutDoesNotHoldBackTheNext(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	ctx := context.Background()
	const prov, cyc1, cyc2, renter = "p-short", "cyc-20260101", "cyc-20260215", "r-p-short"
	st.settle(t, prov, cyc1, "CNY", "100.00")
	st.waitStatus(t, prov, cyc1, "action_required", waitLong)
	if _, err := st.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: "claw-" + prov, Description: "refund to the renter",
		Postings: []*ledgerv1.Posting{
			{Account: ids.ProviderAvailable(prov), Direction: "debit", Amount: "30.00", Currency: "CNY"},
			{Account: "renter:" + renter + ":wallet", Direction: "credit", Amount: "30.00", Currency: "CNY"},
		}}); err != nil {
		t.Fatal(err)
	}
	st.setup(t, prov, "6222000011117772")
	testkit.Eventually(t, waitLong, func() bool {
		p := st.waitStatus(t, prov, cyc1, "action_required", waitLong)
		return strings.HasPrefix(p.StatusReason, "insufficient_available")
	}, "the first payout waits for available")

	// The next settlement's message before its ledger credit (the credit's
	// wake may come first or not at all: its consumer starts at new messages).
	st.publishSettled(t, prov, cyc2, "CNY", "200.00")
	st.waitStatus(t, prov, cyc2, "action_required", waitLong)
	st.settleLedgerOnly(t, prov, cyc2, "CNY", "200.00")
	// available 270.00 covers either payout, not both: the credit wakes
	// both, and whichever is gated first is paid; the other waits on.
	var first, second *payoutv1.Payout
	testkit.Eventually(t, waitLong, func() bool {
		for _, p := range st.payouts(t, prov) {
			switch p.CycleId {
			case cyc1:
				first = p
			case cyc2:
				second = p
			}
		}
		return first != nil && second != nil && (first.Status == "paid" || second.Status == "paid")
	}, "one of the two payouts paid")
	if second.Net != "200.00" || len(second.Statements) != 1 || first.Net != "100.00" || first.Status == "canceled" {
		t.Errorf("payouts: %s %s (%v), %s %s; want 200.00 of %s alone and 100.00 of %s", second.Status, second.Net, second.Statements,
			first.Status, first.Net, cyc2, cyc1)
	}
	waiting, left := first, "70.00" // the second paid
	if first.Status == "paid" {
		waiting, left = second, "170.00"
	}
	waiting = st.waitStatus(t, prov, waiting.CycleId, "action_required", waitLong)
	if !strings.HasPrefix(waiting.StatusReason, "insufficient_available") {
		t.Errorf("the other payout: %s (%s)", waiting.Status, waiting.StatusReason)
	}
	st.checkProvider(t, prov, "CNY", left, "0")
}
