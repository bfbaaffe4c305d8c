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
