package payoutstack_test

import (
	"context"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

// A departed provider, against the real ledger, the sandbox rail and
// Temporal: p-gone's bank account is closed, its payout fails
// account_frozen and its 300.00 is back in available; nobody will give a
// new method, and :cancel refuses a failed payout. Finance pays it by hand
// (a manual entry, Dr available / Cr bank:client) and settles the payout
// outside naming that entry: settled_outside, in its history, the failed
// gauge back to 0, :retry refused, the ledger's figures exact and the
// segregated-funds report balanced. An entry of another provider or
// amount is refused first.
func TestDepartedProviderPayoutSettledOutside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStack(t, payout.Config{})
	const cyc = "cyc-20260101"
	st.setup(t, "p-gone", "6222000011110002")
	st.setup(t, "p-stay", "6222000011110002")
	st.settle(t, "p-gone", cyc, "CNY", "300.00")
	st.settle(t, "p-stay", cyc, "CNY", "250.00")
	p := st.waitStatus(t, "p-gone", cyc, "failed", waitLong)
	st.waitStatus(t, "p-stay", cyc, "failed", waitLong)
	st.checkProvider(t, "p-gone", "CNY", "300.00", "0")
	failed := func() float64 {
		t.Helper()
		var q string
		for _, m := range payout.Metrics() {
			if m.Name == "gpubill_payouts" {
				q = m.Query
			}
		}
		var n float64
		if err := st.d.Pool.QueryRow(ctx, `select coalesce(sum(g.n), 0) from (`+q+`) as g(status, currency, n) where g.status = 'failed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := failed(); n != 2 {
		t.Fatalf("gpubill_payouts{status=failed} %v, want 2", n)
	}
	if _, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: p.PayoutId, Reason: "gone"}); status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition {
		t.Fatalf("cancel of a failed payout: %v, want refused", err)
	}

	pay := func(key, provider, amount string) string {
		t.Helper()
		tx, err := st.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: key, Description: "paid by hand",
			Postings: []*ledgerv1.Posting{
				{Account: ids.ProviderAvailable(provider), Direction: "debit", Amount: amount, Currency: "CNY"},
				{Account: "bank:client", Direction: "credit", Amount: amount, Currency: "CNY"},
			}})
		if err != nil {
			t.Fatal(err)
		}
		return tx.Transaction.TransactionId
	}
	other, short := pay("by-hand-stay", "p-stay", "250.00"), pay("by-hand-part", "p-gone", "100.00")
	for _, give := range []string{other, short} {
		_, err := st.s.API().SettlePayoutOutside(fin, &payoutv1.SettlePayoutOutsideRequest{PayoutId: p.PayoutId, TransactionId: give, Reason: "ICBC ref 7"})
		if status.Code(apperr.ToStatus(err)) != codes.Aborted {
			t.Fatalf("settle outside by %s: %v, want a conflict", give, err)
		}
	}
	if _, err := st.ledger.ReverseTransaction(ctx, &ledgerv1.ReverseTransactionRequest{TransactionId: short, IdempotencyKey: "rev-part", Description: "one entry of the net"}); err != nil {
		t.Fatal(err)
	}
	st.checkProvider(t, "p-gone", "CNY", "300.00", "0")
	byHand := pay("by-hand", "p-gone", "300.00")
	out, err := st.s.API().SettlePayoutOutside(fin, &payoutv1.SettlePayoutOutsideRequest{PayoutId: p.PayoutId, TransactionId: byHand, Reason: "ICBC ref 7"})
	if err != nil {
		t.Fatal(err)
	}
	h := out.Payout.StatusHistory
	if out.Payout.Status != "settled_outside" || !strings.HasSuffix(history(out.Payout), ">failed>settled_outside") || !strings.Contains(h[len(h)-1].Note, byHand) {
		t.Fatalf("settled outside: %s, history %s", out.Payout.Status, history(out.Payout))
	}
	if n := failed(); n != 1 {
		t.Fatalf("gpubill_payouts{status=failed} %v after p-gone's settled outside, want 1 (p-stay's)", n)
	}
	st.method(t, "p-gone", "6222000099990001") // a method at last: still no retry
	if _, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: p.PayoutId, Reason: "new account"}); status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition {
		t.Fatalf("retry of a payout settled outside: %v, want refused", err)
	}
	st.checkProvider(t, "p-gone", "CNY", "0", "0")
	st.checkProvider(t, "p-stay", "CNY", "0", "0")
	// Both paid by hand: 300.00 + 250.00 out of bank:client.
	st.checkFunds(t, "CNY", decimal.RequireFromString("550.00"))
}
