package postgres

import (
	"context"
	"errors"
	"fmt"
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

func (r *countingRail) CheckCurrency(currency string) error {
	if currency != "CNY" {
		return apperr.Invalid("currency", "CNY only, not %s", currency)
	}
	return nil
}

func (r *countingRail) Order(_ context.Context, _ string, _ decimal.Decimal, _, orderID string, opened time.Time) (string, time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.orders[orderID]++
	return "https://pay.example/" + orderID, opened.Add(2 * time.Hour), nil
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
