package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// countingRail is a checkout that counts the orders it was asked to make.
type countingRail struct{ orders map[string]int }

func (r *countingRail) Order(_ context.Context, _ string, _ decimal.Decimal, _, orderID string) (string, time.Time, error) {
	r.orders[orderID]++
	return "https://pay.example/" + orderID, time.Now().Add(2 * time.Hour), nil
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
	if err != nil || again.ID != first.ID || again.PayURL != first.PayURL {
		t.Fatalf("the same request again: %+v, %v; want %+v", again, err, first)
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
}
