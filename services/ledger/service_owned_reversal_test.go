package ledger_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// serviceTransfer is a transfer posted by a service's identity under its
// key, with its metadata.
func serviceTransfer(key, from, to, amount string, md map[string]string) app.CreateTransactionInput {
	in := transfer(key, from, to, amount, "USD")
	in.Internal, in.Metadata = true, md
	return in
}

func payoutStep(id string, attempt int, step, from, to string) app.CreateTransactionInput {
	key := "payout-" + id + "-" + strconv.Itoa(attempt) + "-" + step
	return serviceTransfer(key, from, to, "10.00", map[string]string{"kind": "payout", "payout_id": id, "provider_id": "p-1", "step": step})
}

// A transaction a service posted and still tracks is not finance's to
// reverse: the service never sees the reversal. A payout's own steps
// (payout-{id}-{attempt}-{step}, kind payout) and a commission sweep
// settlement posted on its own (settle-…:sweep, kind commission_sweep) are
// refused with a FailedPrecondition naming what to do instead, and nothing
// moves. Reversing submitted in flight emptied in_transit (the paid posting
// refused for good) and freed the net in available for another payout;
// a reversed sweep left the statement swept and the commission in
// bank:client for good. Finance's own entries, even one naming a payout,
// and the other service postings whose service notices (a tax
// remittance) are still reversed.
func TestServiceOwnedTransactionsAreNotReversed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "100", "USD", "top")
	const available, inTransit = "provider:p-1:available", "provider:p-1:in_transit"
	if _, err := f.app.CreateTransaction(f.ctx, transfer("earn", "renter:r-1:wallet", available, "60.00", "USD")); err != nil {
		t.Fatal(err)
	}
	post := func(in app.CreateTransactionInput) *domain.Transaction {
		t.Helper()
		tx, err := f.app.CreateTransaction(f.ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", in.IdempotencyKey, err)
		}
		return tx
	}
	// po_1: submitted, paid, returned, then submitted again and failed;
	// po_2: submitted and canceled in the bank-file queue.
	steps := []struct {
		tx    *domain.Transaction
		route string
	}{
		{post(payoutStep("po_1", 1, "submitted", available, inTransit)), ":cancel"},
		{post(payoutStep("po_1", 1, "paid", inTransit, domain.BankClient)), ":settle-outside"},
		{post(payoutStep("po_1", 1, "returned", domain.BankClient, available)), ":retry"},
		{post(payoutStep("po_1", 2, "submitted", available, inTransit)), ":cancel"},
		{post(payoutStep("po_1", 2, "failed", inTransit, available)), ":retry"},
		{post(payoutStep("po_2", 1, "submitted", available, inTransit)), ":cancel"},
		{post(payoutStep("po_2", 1, "canceled", inTransit, available)), "next payout"},
		// Its metadata without provider_id: the provider read from its postings.
		{post(serviceTransfer("payout-po_3-1-submitted", available, inTransit, "10.00",
			map[string]string{"kind": "payout", "payout_id": "po_3", "step": "submitted"})), ":cancel"},
	}
	sweep := post(serviceTransfer("settle-cyc-20261112-p-1:USD:sweep", domain.BankOperating, domain.BankClient, "3.00",
		map[string]string{"kind": "commission_sweep", "cycle_id": "cyc-20261112", "provider_id": "p-1"}))

	before := map[string]string{}
	for _, a := range []string{available, inTransit, domain.BankClient, domain.BankOperating} {
		before[a] = f.balance(t, a, "USD").String()
	}
	for _, s := range steps {
		_, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: s.tx.ID, IdempotencyKey: "rev-" + s.tx.ID})
		// The provider's own accounts, not the placeholder.
		wantPrecondition(t, err, s.tx.ID, "po_", "payout", s.route, inTransit, available)
		if strings.Contains(err.Error(), "{id}") {
			t.Fatalf("error %q names the provider's accounts by placeholder, want %s and %s", err, inTransit, available)
		}
	}
	_, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: sweep.ID})
	wantPrecondition(t, err, sweep.ID, "commission sweep", "settlement", "treasury")
	for a, want := range before {
		wantBalance(t, f, a, "USD", want)
	}
	for _, s := range append(steps, struct {
		tx    *domain.Transaction
		route string
	}{sweep, ""}) {
		got, err := f.app.GetTransaction(f.ctx, s.tx.ID)
		if err != nil || got.ReversedBy != "" {
			t.Fatalf("%s: reversed_by %q, %v; want it standing", s.tx.IdempotencyKey, got.ReversedBy, err)
		}
	}

	// Still reversible: finance's own entry, though it names a payout
	// (not under payout's keys), and a tax remittance (tax's
	// RemitReversed sees its reversal).
	own := post(app.CreateTransactionInput{IdempotencyKey: "hand-pay-po_1", Metadata: map[string]string{"kind": "payout", "payout_id": "po_1"},
		Postings: []domain.RawPosting{
			{Account: available, Direction: "debit", Amount: "5.00", Currency: "USD"},
			{Account: domain.BankClient, Direction: "credit", Amount: "5.00", Currency: "USD"},
		}})
	if _, err := f.app.CreateTransaction(f.ctx, transfer("withhold", "renter:r-1:wallet", "tax:withheld:CN", "4.00", "USD")); err != nil {
		t.Fatal(err)
	}
	rem := post(serviceTransfer("rem-2026-04-CN-USD", "tax:withheld:CN", domain.BankClient, "4.00",
		map[string]string{"kind": "tax_remittance", "period": "2026-04", "jurisdiction": "CN"}))
	for _, tx := range []*domain.Transaction{own, rem} {
		if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: tx.ID}); err != nil {
			t.Fatalf("reversing %s: %v", tx.IdempotencyKey, err)
		}
	}
}

// Through REST the refusal is a FAILED_PRECONDITION (code 9, HTTP 400, as a closed
// cycle's reversal) naming the payout's routes, or what finance does
// about a sweep; nothing is posted.
func TestRESTServiceOwnedReversalRefused(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	f.deposit(t, "r-1", "100", "USD", "top")
	if _, err := f.app.CreateTransaction(f.ctx, transfer("earn", "renter:r-1:wallet", "provider:p-1:available", "60.00", "USD")); err != nil {
		t.Fatal(err)
	}
	sub, err := f.app.CreateTransaction(f.ctx, payoutStep("po_1", 1, "submitted", "provider:p-1:available", "provider:p-1:in_transit"))
	if err != nil {
		t.Fatal(err)
	}
	sweep, err := f.app.CreateTransaction(f.ctx, serviceTransfer("settle-cyc-20261112-p-1:USD:sweep", domain.BankOperating, domain.BankClient, "3.00",
		map[string]string{"kind": "commission_sweep", "cycle_id": "cyc-20261112", "provider_id": "p-1"}))
	if err != nil {
		t.Fatal(err)
	}
	for tx, want := range map[string][]string{sub.ID: {`"code":9`, "po_1", ":cancel", ":retry", ":settle-outside"},
		sweep.ID: {`"code":9`, "commission sweep", "treasury"}} {
		code, body := c.do("POST", "/v1/transactions/"+tx+":reverse", `{"idempotency_key":"rev-`+tx+`"}`)
		if code != 400 {
			t.Fatalf("reversing %s: %d %s; want 400", tx, code, body)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Fatalf("reversing %s: %s does not name %q", tx, body, w)
			}
		}
	}
	wantBalance(t, f, "provider:p-1:in_transit", "USD", "10.00")
	wantBalance(t, f, domain.BankOperating, "USD", "3.00")
}
