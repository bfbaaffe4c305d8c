package ledger_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

func railRefundOf(key, renter, ref, amount, cur string) app.CreateTransactionInput {
	in := transfer(key, "renter:"+renter+":wallet", "bank:client", amount, cur)
	in.Metadata = map[string]string{"kind": domain.KindRailRefund, "external_ref": ref}
	return in
}

// A rail_refund records a refund the rail made of one top-up: it takes
// at most what that deposit brought in, less what rail_refunds naming it
// (or its reversal) already took. Two operators handling the same
// refund (a plain refund of 200.00, then, refused a second one, a
// rail_refund as the refusal suggested; or two on-call people paged by
// GpubillTopUpRefundedAtTheRail) each posted it: r-t9 at -400.00 after a
// 200.00 top-up, the excess paid from other renters' money.
func TestRailRefundIsBoundedByItsDeposit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-other", "1000.00", "CNY", "bank-other")
	f.deposit(t, "r-t9", "200.00", "CNY", "alipay:T9")
	if _, err := f.app.CreateTransaction(f.ctx, transfer("plain-t9", "renter:r-t9:wallet", "bank:client", "200.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	// The ledger cannot tell a plain refund from the rail's: the first
	// rail_refund of T9 is recorded (see the report), the second is not.
	first, err := f.app.CreateTransaction(f.ctx, railRefundOf("rail-t9-a", "r-t9", "alipay:T9", "200.00", "CNY"))
	if err != nil {
		t.Fatalf("the rail's refund of alipay:T9: %v", err)
	}
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t9-b", "r-t9", "alipay:T9", "200.00", "CNY"))
	wantInvalid(t, err, "alipay:T9 brought in 200.00 CNY, of which rail refunds or its reversal already took 200.00 CNY; 0.00 CNY remains")
	wantBalance(t, f, "renter:r-t9:wallet", "CNY", "-200.00")
	wantBalance(t, f, "bank:client", "CNY", "800.00")
	// A replay of the first still answers it.
	again, err := f.app.CreateTransaction(f.ctx, railRefundOf("rail-t9-a", "r-t9", "alipay:T9", "200.00", "CNY"))
	if err != nil || again.ID != first.ID {
		t.Fatalf("replay of rail-t9-a: %v, %v; want %s", again, err, first.ID)
	}
	// The plain refund's refusal no longer reads as advice to repost as
	// a rail_refund.
	_, err = f.app.CreateTransaction(f.ctx, transfer("plain-t9-again", "renter:r-t9:wallet", "bank:client", "200.00", "CNY"))
	wantInvalid(t, err, "only for a top-up the rail itself has already returned")

	// One above its deposit, and one in another currency, are refused.
	f.deposit(t, "r-t10", "100.00", "CNY", "alipay:T10")
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t10-over", "r-t10", "alipay:T10", "100.01", "CNY"))
	wantInvalid(t, err, "100.00 CNY remains")
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t10-usd", "r-t10", "alipay:T10", "50.00", "USD"))
	wantInvalid(t, err, "CNY")
	// Two partial ones summing to it are recorded; a cent more is not.
	for _, key := range []string{"rail-t10-60", "rail-t10-40"} {
		amt := map[string]string{"rail-t10-60": "60.00", "rail-t10-40": "40.00"}[key]
		if _, err := f.app.CreateTransaction(f.ctx, railRefundOf(key, "r-t10", "alipay:T10", amt, "CNY")); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t10-cent", "r-t10", "alipay:T10", "0.01", "CNY"))
	wantInvalid(t, err, "already took 100.00 CNY; 0.00 CNY remains")
	wantBalance(t, f, "renter:r-t10:wallet", "CNY", "0")
	// A rail_refund posted in error and reversed no longer counts.
	sixty, err := f.app.CreateTransaction(f.ctx, railRefundOf("rail-t10-60", "r-t10", "alipay:T10", "60.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: sixty.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.CreateTransaction(f.ctx, railRefundOf("rail-t10-60b", "r-t10", "alipay:T10", "60.00", "CNY")); err != nil {
		t.Fatalf("rail refund of alipay:T10 after one was reversed: %v", err)
	}

	// A reversed deposit has nothing left to refund.
	dep := f.deposit(t, "r-t11", "50.00", "CNY", "alipay:T11")
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t11", "r-t11", "alipay:T11", "50.00", "CNY"))
	wantInvalid(t, err, "0.00 CNY remains")

	// Two rail_refunds of one deposit at once: one is recorded.
	f.deposit(t, "r-t12", "300.00", "CNY", "alipay:T12")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, key := range []string{"rail-t12-a", "rail-t12-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.app.CreateTransaction(f.ctx, railRefundOf(key, "r-t12", "alipay:T12", "300.00", "CNY"))
		}()
	}
	wg.Wait()
	var inv *apperr.InvalidError
	if (errs[0] == nil) == (errs[1] == nil) || !errors.As(errors.Join(errs...), &inv) {
		t.Fatalf("two rail refunds of alipay:T12 at once: %v, %v; want one recorded, one refused", errs[0], errs[1])
	}
	wantBalance(t, f, "renter:r-t12:wallet", "CNY", "0")
}

// A deposit a rail_refund names is not reversed as well: the reversal
// would take its amount from the wallet a second time.
func TestDepositWithRailRefundIsNotReversed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-other", "1000.00", "CNY", "bank-other")
	dep := f.deposit(t, "r-t13", "100.00", "CNY", "alipay:T13")
	if _, err := f.app.CreateTransaction(f.ctx, railRefundOf("rail-t13", "r-t13", "alipay:T13", "30.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	_, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID})
	if !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("reversal of alipay:T13 after a rail refund of 30.00: %v; want a conflict", err)
	}
	wantBalance(t, f, "renter:r-t13:wallet", "CNY", "70.00")
}

// A rail_refund accepted before the rule that it is in its deposit's
// currency (27b6e2c2) answers its replay as it did when sent again under
// its key: the replay is looked up before the rules for new writes. A new
// rail_refund of that shape is still refused, and the key with another
// request is a conflict.
func TestRailRefundAcceptedBeforeTheCurrencyRuleReplays(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-other", "1000.00", "USD", "bank-other-usd")
	f.deposit(t, "r-t14", "100.00", "CNY", "alipay:T14")
	f.deposit(t, "r-t14", "100.00", "USD", "bank-t14-usd")
	// As an earlier version posted it: CreateTransaction's entry, its
	// checks before the post (checkRailRefund) as they were then.
	in := railRefundOf("rail-t14-usd", "r-t14", "alipay:T14", "50.00", "USD")
	early := earlierEntry(t, in)
	if err := f.app.Store.WithTx(f.ctx, func(tx app.Tx) error {
		fresh, _, err := tx.Post(f.ctx, []*domain.Transaction{early})
		if err == nil && len(fresh) != 1 {
			err = fmt.Errorf("%d of 1 posted", len(fresh))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "renter:r-t14:wallet", "USD", "50.00")

	again, err := f.app.CreateTransaction(f.ctx, in)
	if err != nil || again.ID != early.ID {
		t.Fatalf("replay of rail-t14-usd (posted before the currency rule): %v, %v; want %s", again, err, early.ID)
	}
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t14-usd", "r-t14", "alipay:T14", "60.00", "USD"))
	if !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("rail-t14-usd with another amount: %v; want a conflict", err)
	}
	_, err = f.app.CreateTransaction(f.ctx, railRefundOf("rail-t14-usd-2", "r-t14", "alipay:T14", "50.00", "USD"))
	wantInvalid(t, err, `deposit "alipay:T14" is in CNY, not USD`)
	wantBalance(t, f, "renter:r-t14:wallet", "USD", "50.00")
}

// earlierEntry is the transaction CreateTransaction builds for in (a
// manual entry, effective now), with the request hash a replay of in
// carries.
func earlierEntry(t *testing.T, in app.CreateTransactionInput) *domain.Transaction {
	t.Helper()
	ps := make([]domain.Posting, len(in.Postings))
	for i, r := range in.Postings {
		a, err := domain.ParseAddress(r.Account)
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = domain.Posting{Account: a, Direction: domain.Direction(r.Direction), Amount: dec(r.Amount), Currency: r.Currency}
	}
	h, err := domain.RequestHash("transaction", map[string]any{"description": in.Description, "effective_at": "",
		"metadata": in.Metadata, "postings": domain.CanonicalPostings(ps)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	return &domain.Transaction{ID: ids.New(""), IdempotencyKey: in.IdempotencyKey, Kind: domain.TxManual,
		EffectiveAt: now, CreatedAt: now, Metadata: in.Metadata, Postings: ps, RequestHash: h}
}
