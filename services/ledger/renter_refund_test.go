package ledger_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A renter's refund (finance's Dr renter:{id}:wallet / Cr bank:client)
// takes at most what the wallet holds: two operators refunding r-ref's
// 200.00 under two keys paid it out twice, the second 200.00 from other
// renters' money in bank:client, and left r-ref owing 200.00 it never
// had. Two refunds at once are judged one after the other. A refund the
// rail already made (recorded as rail_refund, naming the deposit) may
// take the wallet below zero, as the money has left.
func TestRenterRefundCannotOverdrawTheWallet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-ref", "200.00", "CNY", "bank-ref")
	f.deposit(t, "r-other", "500.00", "CNY", "bank-other")
	if _, err := f.app.CreateTransaction(f.ctx, transfer("refund-a", "renter:r-ref:wallet", "bank:client", "200.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	_, err := f.app.CreateTransaction(f.ctx, transfer("refund-b", "renter:r-ref:wallet", "bank:client", "200.00", "CNY"))
	wantInvalid(t, err, "renter:r-ref:wallet")
	wantBalance(t, f, "renter:r-ref:wallet", "CNY", "0")
	wantBalance(t, f, "bank:client", "CNY", "500.00")

	// Two refunds of 300.00 of r-other's 500.00 at once: one is paid.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, key := range []string{"refund-o1", "refund-o2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.app.CreateTransaction(f.ctx, transfer(key, "renter:r-other:wallet", "bank:client", "300.00", "CNY"))
		}()
	}
	wg.Wait()
	var inv *apperr.InvalidError
	if (errs[0] == nil) == (errs[1] == nil) || !errors.As(errors.Join(errs...), &inv) {
		t.Fatalf("two refunds of 300.00 of 500.00 at once: %v, %v; want one paid, one refused", errs[0], errs[1])
	}
	wantBalance(t, f, "renter:r-other:wallet", "CNY", "200.00")

	// A rail refund of a top-up r-rail spent most of: recorded as made.
	f.deposit(t, "r-rail", "100.00", "CNY", "alipay:T1")
	cyc := f.app.Calendar.At(time.Now()).ID
	if _, err := f.app.CreateTransaction(f.ctx, transfer("use-rail", "renter:r-rail:wallet", domain.ProviderPendingAddr("p-1", cyc), "80.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	railRefund := func(key, renter, ref string) app.CreateTransactionInput {
		in := transfer(key, "renter:"+renter+":wallet", "bank:client", "100.00", "CNY")
		in.Metadata = map[string]string{"kind": domain.KindRailRefund, "external_ref": ref}
		return in
	}
	_, err = f.app.CreateTransaction(f.ctx, transfer("rail-plain", "renter:r-rail:wallet", "bank:client", "100.00", "CNY"))
	wantInvalid(t, err, "renter:r-rail:wallet")
	_, err = f.app.CreateTransaction(f.ctx, railRefund("rail-other", "r-rail", "bank-other"))
	wantInvalid(t, err, "external_ref")
	if _, err := f.app.CreateTransaction(f.ctx, railRefund("rail-T1", "r-rail", "alipay:T1")); err != nil {
		t.Fatalf("the rail's refund of alipay:T1 recorded: %v", err)
	}
	wantBalance(t, f, "renter:r-rail:wallet", "CNY", "-80.00")
}
