package ledger_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

func wantPrecondition(t *testing.T, err error, contains ...string) {
	t.Helper()
	if !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("want a failed precondition, got %v", err)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Fatalf("error %q does not name %q", err, c)
		}
	}
}

// Once a cycle is closed, its provider pending accounts take only their
// settlement (a debit of the whole balance): a manual credit, a partial
// debit, and a reversal of a charge or of the settlement are refused with a
// FailedPrecondition naming the cycle, so no closed cycle is left holding
// money or negative. Before the close, the same entries go through.
func TestClosedCyclePendingTakesOnlyItsSettlement(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const closed, next = "cyc-20261112", "cyc-20261227"
	pending := "provider:p-1:pending:" + closed
	f.deposit(t, "r-1", "100", "USD", "top")
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "b1", charge("ch-1", "r-1", "p-1", closed, "10.00"))}); err != nil {
		t.Fatal(err)
	}
	// While the cycle is open, finance may adjust it.
	if _, err := f.app.CreateTransaction(f.ctx, transfer("adjust-open", "renter:r-1:wallet", pending, "2.00", "USD")); err != nil {
		t.Fatal(err)
	}
	chargeTx, _, err := f.app.ListTransactions(f.ctx, pending, nil, 0, "")
	if err != nil || len(chargeTx) != 2 {
		t.Fatalf("transactions on %s: %d, %v", pending, len(chargeTx), err)
	}
	if _, err := f.app.CloseLedgerCycle(f.ctx, closed); err != nil {
		t.Fatal(err)
	}

	_, err = f.app.CreateTransaction(f.ctx, transfer("credit-closed", "renter:r-1:wallet", pending, "1.00", "USD"))
	wantPrecondition(t, err, closed, "provider:p-1:pending:"+next)
	_, err = f.app.CreateTransaction(f.ctx, transfer("partial-debit", pending, "renter:r-1:wallet", "5.00", "USD"))
	wantPrecondition(t, err, closed, "settled in full")
	for _, tx := range chargeTx {
		_, err = f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: tx.ID})
		wantPrecondition(t, err, closed, "reversal")
	}
	// The whole balance out, but not by the provider's settlement: a refund
	// to the renter left the snapshot unpayable (the settlement refused for
	// good, the cycle closing for good).
	_, err = f.app.CreateTransaction(f.ctx, transfer("refund-all", pending, "renter:r-1:wallet", "12.00", "USD"))
	wantPrecondition(t, err, closed, "settlement alone")
	other := transfer("other-settles", pending, "renter:r-1:wallet", "12.00", "USD")
	other.Internal, other.Metadata = true, map[string]string{"kind": "settlement", "cycle_id": closed, "provider_id": "p-2"}
	_, err = f.app.CreateTransaction(f.ctx, other)
	wantPrecondition(t, err, closed, "settlement alone")
	wantBalance(t, f, pending, "USD", "12.00")

	// The settlement: the whole balance out, in one transaction with its sweep.
	settle := app.CreateTransactionInput{IdempotencyKey: "settle-" + closed + "-p-1:USD", Internal: true,
		Metadata: map[string]string{"kind": "settlement", "cycle_id": closed, "provider_id": "p-1"}, Postings: []domain.RawPosting{
			{Account: pending, Direction: "debit", Amount: "12.00", Currency: "USD"},
			{Account: domain.PlatformCommission, Direction: "credit", Amount: "3.00", Currency: "USD"},
			{Account: "tax:withheld:CN", Direction: "credit", Amount: "1.80", Currency: "USD"},
			{Account: "provider:p-1:available", Direction: "credit", Amount: "7.20", Currency: "USD"},
			{Account: domain.BankOperating, Direction: "debit", Amount: "3.00", Currency: "USD"},
			{Account: domain.BankClient, Direction: "credit", Amount: "3.00", Currency: "USD"},
		}}
	st, err := f.app.CreateTransaction(f.ctx, settle)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.app.CreateTransaction(f.ctx, settle); err != nil || again.ID != st.ID {
		t.Fatalf("settlement replay: %v, %v; want the original %s", again, err, st.ID)
	}
	wantBalance(t, f, pending, "USD", "0")
	_, err = f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: st.ID})
	wantPrecondition(t, err, closed, "reversal")
	_, err = f.app.CreateTransaction(f.ctx, transfer("after-settled", pending, "renter:r-1:wallet", "0.01", "USD"))
	if err == nil {
		t.Fatal("a debit of a settled pending account was accepted")
	}
	wantBalance(t, f, pending, "USD", "0")
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != "balanced" || len(rep.Breaches) != 0 {
		t.Fatalf("settlement with its sweep reported %s with breaches %+v, want balanced without", rep.Verdict, rep.Breaches)
	}
}

// Through REST, a manual entry into a closed cycle's pending account is a 400
// (FAILED_PRECONDITION) naming the cycle, and changes nothing.
func TestRESTClosedCycleEntryIs400(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	const closed = "cyc-20261112"
	top := f.deposit(t, "r-1", "10", "USD", "top")
	if _, err := f.app.CloseLedgerCycle(f.ctx, closed); err != nil {
		t.Fatal(err)
	}
	code, body := c.do("POST", "/v1/transactions", `{"idempotency_key":"late-credit","postings":[
		{"account":"renter:r-1:wallet","direction":"debit","amount":"1.00","currency":"USD"},
		{"account":"provider:p-1:pending:`+closed+`","direction":"credit","amount":"1.00","currency":"USD"}]}`)
	if code != 400 || !strings.Contains(body, closed) || !strings.Contains(body, "provider:p-1:pending:cyc-20261227") {
		t.Fatalf("credit into closed %s: %d %s; want 400 naming it and the open cycle", closed, code, body)
	}
	// Finance may not take a key a service posts under: the service's own post was a conflict for good.
	for _, key := range []string{"rem-2026-04-CN-CNY", "settle-cyc-20261112-p-1:USD", "payout-po_1-1-in_transit", "chg_0123"} {
		code, body = c.do("POST", "/v1/transactions", `{"idempotency_key":"`+key+`","postings":[
			{"account":"renter:r-1:wallet","direction":"debit","amount":"1.00","currency":"USD"},
			{"account":"bank:client","direction":"credit","amount":"1.00","currency":"USD"}]}`)
		if code != 400 || !strings.Contains(body, "idempotency_key") {
			t.Fatalf("a finance entry under %s: %d %s; want 400 on idempotency_key", key, code, body)
		}
		// Nor a reversal (it was taken, with a 200).
		code, body = c.do("POST", "/v1/transactions/"+top.ID+":reverse", `{"idempotency_key":"`+key+`"}`)
		if code != 400 || !strings.Contains(body, "idempotency_key") {
			t.Fatalf("a reversal under %s: %d %s; want 400 on idempotency_key", key, code, body)
		}
	}
	// Finance may not name its entry a settlement (the one debit a closed cycle's pending account takes).
	for _, kind := range []string{"settlement", "commission_sweep"} {
		code, body = c.do("POST", "/v1/transactions", `{"idempotency_key":"as-`+kind+`","metadata":{"kind":"`+kind+`","cycle_id":"`+closed+`","provider_id":"p-1"},"postings":[
			{"account":"renter:r-1:wallet","direction":"debit","amount":"1.00","currency":"USD"},
			{"account":"bank:client","direction":"credit","amount":"1.00","currency":"USD"}]}`)
		if code != 400 || !strings.Contains(body, "metadata.kind") {
			t.Fatalf("a finance entry of kind %s: %d %s; want 400 on metadata.kind", kind, code, body)
		}
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "10")
}

// Concurrent manual writes are committed in groups: every one touching a
// closed cycle's pending account is refused on its own (the group falls back
// to one write at a time), and the others are posted.
func TestClosedCycleRefusedInsideGroupCommits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const closed, n = "cyc-20261112", 48
	if _, err := f.app.CloseLedgerCycle(f.ctx, closed); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := "renter:r-1:wallet"
			if i%2 == 1 {
				to = "provider:p-1:pending:" + closed
			}
			_, errs[i] = f.app.CreateTransaction(f.ctx, transfer(fmt.Sprintf("w-%d", i), "bank:client", to, "1", "USD"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("write %d: %v", i, err)
		}
		if i%2 == 1 && !errors.Is(err, apperr.ErrPrecondition) {
			t.Errorf("write %d into closed %s: %v, want a failed precondition", i, closed, err)
		}
	}
	wantBalance(t, f, "provider:p-1:pending:"+closed, "USD", "0")
	wantBalance(t, f, "renter:r-1:wallet", "USD", fmt.Sprint(n/2))
}
