package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// countingRail is a checkout that counts the orders it was asked to make.
type countingRail struct {
	mu     sync.Mutex
	orders map[string]int
}

func (r *countingRail) CheckOrder(currency string, amount decimal.Decimal) error {
	if currency != "CNY" {
		return apperr.Invalid("currency", "CNY only, not %s", currency)
	}
	if amount.GreaterThan(decimal.NewFromInt(1000000)) {
		return apperr.Invalid("amount", "at most 1000000")
	}
	return nil
}

func (r *countingRail) OrderTimeout() time.Duration { return 2 * time.Hour }

func (r *countingRail) Order(_ context.Context, _ string, _ decimal.Decimal, _, orderID string, opened time.Time) (string, time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.orders[orderID]++
	return "https://pay.example/" + orderID, opened.Add(r.OrderTimeout()), nil
}

// An idempotency key opens one top-up order: sent again it answers the same
// order; with another rail, amount or currency it is a conflict and no rail
// is asked. The key again on the other rail opened a second payable order
// under the same number (each payment its own deposit: the renter paid, and
// was credited, twice).
func TestTopUpKeyOpensOneOrder(t *testing.T) {
	ctx := context.Background()
	s := &Store{Pool: migratedPool(t)}
	alipay, wechat := &countingRail{orders: map[string]int{}}, &countingRail{orders: map[string]int{}}
	o := &app.TopUpOrders{Rails: map[string]app.Checkout{"alipay": alipay, "wechatpay": wechat}, Orders: s, Clock: clock.System{}}
	in := app.TopUpOrderInput{RenterID: "r-top", Rail: "alipay", Amount: "100.00", Currency: "CNY", IdempotencyKey: "k-1"}
	first, err := o.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := o.Create(ctx, in)
	if err != nil || again.ID != first.ID || again.PayURL != first.PayURL || !again.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("the same request again: %+v, %v; want %+v (the rail asked the same)", again, err, first)
	}
	// Sent twice at once: both answered the order (the second read the
	// first's row from a snapshot taken before it committed: a 500).
	for round := range 40 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := in
				x.IdempotencyKey = fmt.Sprintf("k-side-by-side-%d", round)
				<-start
				if _, err := o.Create(ctx, x); err != nil {
					t.Errorf("the same request side by side: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	for name, mod := range map[string]func(*app.TopUpOrderInput){
		"another rail":   func(x *app.TopUpOrderInput) { x.Rail = "wechatpay" },
		"another amount": func(x *app.TopUpOrderInput) { x.Amount = "50.00" },
		"another scale":  func(x *app.TopUpOrderInput) { x.Amount = "100.0" }, // the same amount: answered
	} {
		x := in
		mod(&x)
		_, err := o.Create(ctx, x)
		if name == "another scale" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, apperr.ErrConflict) {
			t.Errorf("the key again with %s: %v, want a conflict", name, err)
		}
	}
	if len(wechat.orders) != 0 {
		t.Errorf("WeChat Pay was asked for %v: a second payable order", wechat.orders)
	}
	if _, err := o.Create(ctx, app.TopUpOrderInput{RenterID: "r-top", Rail: "wechatpay", Amount: "100.00", Currency: "CNY", IdempotencyKey: "k-2"}); err != nil {
		t.Fatalf("another key on the other rail: %v", err)
	}
	// A currency the rail refuses keeps nothing under the key: the
	// corrected request is answered (it was a 409 naming the refused one).
	wrong := app.TopUpOrderInput{RenterID: "r-top", Rail: "alipay", Amount: "100.00", Currency: "USD", IdempotencyKey: "k-3"}
	if _, err := o.Create(ctx, wrong); !errors.As(err, new(*apperr.InvalidError)) {
		t.Fatalf("USD on a CNY rail: %v, want invalid", err)
	}
	wrong.Currency = "CNY"
	if _, err := o.Create(ctx, wrong); err != nil {
		t.Fatalf("the corrected request under the same key: %v", err)
	}
}

// The same key asked again once its order expired (the rail's order
// timeout after it was first opened) is a failed precondition telling the
// renter to use a new key, and the rail is not asked (WeChat Pay refused
// the time_expire past: a 500); before that it is answered. An amount
// the rail cannot take is a 400 naming amount, and keeps nothing.
func TestTopUpOrderExpired(t *testing.T) {
	ctx := context.Background()
	s := &Store{Pool: migratedPool(t)}
	rail := &countingRail{orders: map[string]int{}}
	opened := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	clk := clock.NewManual(opened)
	o := &app.TopUpOrders{Rails: map[string]app.Checkout{"wechatpay": rail}, Orders: s, Clock: clk}
	in := app.TopUpOrderInput{RenterID: "r-exp", Rail: "wechatpay", Amount: "100.00", Currency: "CNY", IdempotencyKey: "k-exp"}
	first, err := o.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(opened.Add(2*time.Hour - time.Second))
	if again, err := o.Create(ctx, in); err != nil || !again.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("a second before it expires: %+v %v", again, err)
	}
	clk.Set(opened.Add(2 * time.Hour))
	_, err = o.Create(ctx, in)
	if !errors.Is(err, apperr.ErrPrecondition) || !strings.Contains(err.Error(), "new idempotency key") {
		t.Errorf("the key again once its order expired: %v, want a failed precondition naming a new idempotency key", err)
	}
	if n := rail.orders[first.ID]; n != 2 {
		t.Errorf("the rail was asked %d times for %s, want 2 (not once expired)", n, first.ID)
	}
	big := app.TopUpOrderInput{RenterID: "r-exp", Rail: "wechatpay", Amount: "1000000.01", Currency: "CNY", IdempotencyKey: "k-big"}
	var inv *apperr.InvalidError
	if _, err := o.Create(ctx, big); !errors.As(err, &inv) || !strings.Contains(err.Error(), "amount") {
		t.Fatalf("an amount over the rail's limit: %v, want invalid naming amount", err)
	}
	big.Amount = "10.00"
	if _, err := o.Create(ctx, big); err != nil {
		t.Errorf("the corrected amount under the same key: %v (the refused one was kept)", err)
	}
}
