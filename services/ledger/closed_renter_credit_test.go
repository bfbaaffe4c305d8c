package ledger_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// wantClosedConflict: err is the 409 refusing a credit to closed renter.
func wantClosedConflict(t *testing.T, err error, renter string) {
	t.Helper()
	if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "renter "+renter+" is closed") {
		t.Fatalf("credit to closed %s: %v; want a conflict naming %s as closed", renter, err, renter)
	}
	if st, _ := status.FromError(apperr.ToStatus(err)); st.Code() != codes.Aborted { // 409 over REST
		t.Fatalf("credit to closed %s answered %v, want Aborted (409)", renter, st.Code())
	}
}

// A finance entry crediting a closed renter's wallet is refused (409,
// naming the renter), as a deposit is: r-shut was closed with its wallet
// refunded to 0, and a manual entry (Dr bank:client, another renter's
// wallet, a provider's pending) put money back in it, client money of a
// renter gpubill no longer serves, which nothing spends or returns. What
// may credit it: a bad_debt_write_off (up to 0: its own test), and a
// reversal, which restores the reversed entry's state exactly: a refund
// the bank returned is owed to the renter again, its money is back in
// bank:client, and the wallet is the only liability that names whose it
// is (refused, bank:client would hold money owed to no one). An entry
// posted before the close, asked again, answers that entry.
func TestFinanceEntryCreditingAClosedRenterRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cyc := f.app.Calendar.At(time.Now()).ID
	f.deposit(t, "r-shut", "100.00", "CNY", "bank-shut")
	f.deposit(t, "r-live", "300.00", "CNY", "bank-live")
	before, err := f.app.CreateTransaction(f.ctx, transfer("credit-before", "renter:r-live:wallet", "renter:r-shut:wallet", "20.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	refund, err := f.app.CreateTransaction(f.ctx, transfer("refund-shut", "renter:r-shut:wallet", "bank:client", "120.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("live-usage", "renter:r-live:wallet", domain.ProviderPendingAddr("p-1", cyc), "30.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at)
		values ('r-shut', 'CNY', 0, 2, now(), $1), ('r-live', 'CNY', 0, 1, now(), null)`, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The check's "open" answer for r-shut, read by credit-before, stands
	// for up to 2 s (openRenterTTL), as the close's own news lags.
	time.Sleep(2100 * time.Millisecond)

	for _, in := range []app.CreateTransactionInput{
		transfer("shut-from-bank", "bank:client", "renter:r-shut:wallet", "50.00", "CNY"),
		transfer("shut-from-wallet", "renter:r-live:wallet", "renter:r-shut:wallet", "50.00", "CNY"),
		transfer("shut-from-provider", domain.ProviderPendingAddr("p-1", cyc), "renter:r-shut:wallet", "10.00", "CNY"),
	} {
		_, err := f.app.CreateTransaction(f.ctx, in)
		wantClosedConflict(t, err, "r-shut")
	}
	wantBalance(t, f, "renter:r-shut:wallet", "CNY", "0")
	wantBalance(t, f, "renter:r-live:wallet", "CNY", "250.00")

	// Asked again after the close: the entry posted before it.
	again, err := f.app.CreateTransaction(f.ctx, transfer("credit-before", "renter:r-live:wallet", "renter:r-shut:wallet", "20.00", "CNY"))
	if err != nil || again.ID != before.ID {
		t.Fatalf("replay of credit-before after the close: %v, %v; want %s", again, err, before.ID)
	}
	// A debit and a credit of the same amount on the closed wallet: no
	// credit on the net, taken.
	if _, err := f.app.CreateTransaction(f.ctx, app.CreateTransactionInput{IdempotencyKey: "shut-net-zero", Postings: []domain.RawPosting{
		{Account: "renter:r-shut:wallet", Direction: "debit", Amount: "5.00", Currency: "CNY"},
		{Account: "renter:r-shut:wallet", Direction: "credit", Amount: "5.00", Currency: "CNY"},
	}}); err != nil {
		t.Fatalf("net-zero entry on closed r-shut: %v", err)
	}

	// The refund's reversal (the bank returned the transfer) restores it.
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: refund.ID}); err != nil {
		t.Fatalf("reversal of closed r-shut's refund: %v", err)
	}
	wantBalance(t, f, "renter:r-shut:wallet", "CNY", "120.00")
	wantBalance(t, f, "bank:client", "CNY", "400.00")
}

// A finance entry moving money out of a renter's wallet by any shape
// other than a charge pays out at most what the wallet holds, as a
// refund (Dr wallet / Cr bank:client) does: r-thin holding 100.00 moved
// 150.00 to r-fat's wallet (which r-fat's refund then paid out of other
// renters' money in bank:client), or paid 120.00 out to bank:client with
// a fee to the house, and was left owing money it never had. Two such
// entries at once are judged one after the other. A charge (Dr wallet /
// Cr provider pending) may still take a wallet below zero (its credit
// limit), and a reversal still may.
func TestFinanceEntryCannotOverdrawAWalletByAnyShape(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cyc := f.app.Calendar.At(time.Now()).ID
	f.deposit(t, "r-thin", "100.00", "CNY", "bank-thin")
	f.deposit(t, "r-fat", "500.00", "CNY", "bank-fat")

	_, err := f.app.CreateTransaction(f.ctx, transfer("thin-to-fat", "renter:r-thin:wallet", "renter:r-fat:wallet", "150.00", "CNY"))
	wantInvalid(t, err, "renter:r-thin:wallet")
	_, err = f.app.CreateTransaction(f.ctx, app.CreateTransactionInput{IdempotencyKey: "thin-out-fee", Postings: []domain.RawPosting{
		{Account: "renter:r-thin:wallet", Direction: "debit", Amount: "120.00", Currency: "CNY"},
		{Account: "bank:client", Direction: "credit", Amount: "115.00", Currency: "CNY"},
		{Account: domain.PlatformCommission, Direction: "credit", Amount: "5.00", Currency: "CNY"},
	}})
	wantInvalid(t, err, "renter:r-thin:wallet")
	_, err = f.app.CreateTransaction(f.ctx, app.CreateTransactionInput{IdempotencyKey: "thin-split", Postings: []domain.RawPosting{
		{Account: "renter:r-thin:wallet", Direction: "debit", Amount: "110.00", Currency: "CNY"},
		{Account: "renter:r-fat:wallet", Direction: "credit", Amount: "60.00", Currency: "CNY"},
		{Account: domain.ProviderPendingAddr("p-1", cyc), Direction: "credit", Amount: "50.00", Currency: "CNY"},
	}})
	wantInvalid(t, err, "renter:r-thin:wallet")
	wantBalance(t, f, "renter:r-thin:wallet", "CNY", "100.00")
	wantBalance(t, f, "renter:r-fat:wallet", "CNY", "500.00")
	wantBalance(t, f, "bank:client", "CNY", "600.00")

	// Eight moves of 30.00 of r-thin's 100.00 at once (in group commits,
	// were they queued there): three are taken.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.app.CreateTransaction(f.ctx, transfer(fmt.Sprintf("thin-%d", i), "renter:r-thin:wallet", "renter:r-fat:wallet", "30.00", "CNY"))
		}()
	}
	wg.Wait()
	taken := 0
	for _, err := range errs {
		var inv *apperr.InvalidError
		if err == nil {
			taken++
		} else if !errors.As(err, &inv) {
			t.Fatal(err)
		}
	}
	if taken != 3 {
		t.Fatalf("eight moves of 30.00 of 100.00 at once: %d taken, want 3 (%v)", taken, errs)
	}
	wantBalance(t, f, "renter:r-thin:wallet", "CNY", "10.00")

	// A charge may take the wallet below zero.
	charge, err := f.app.CreateTransaction(f.ctx, transfer("thin-usage", "renter:r-thin:wallet", domain.ProviderPendingAddr("p-1", cyc), "70.00", "CNY"))
	if err != nil {
		t.Fatalf("a charge past r-thin's balance: %v", err)
	}
	wantBalance(t, f, "renter:r-thin:wallet", "CNY", "-60.00")
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: charge.ID}); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "renter:r-thin:wallet", "CNY", "10.00")
}
