package alipay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// orders is a top-up order store in memory: the first order kept under a
// number stays.
type orders struct {
	mu   sync.Mutex
	byID map[string]app.TopUpOrder
}

func (s *orders) KeepTopUpOrder(_ context.Context, o app.TopUpOrder, at time.Time) (app.TopUpOrder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kept, ok := s.byID[o.ID]; ok {
		return kept, nil
	}
	o.OpenedAt = at
	s.byID[o.ID] = o
	return o, nil
}

// A top-up of "10.000" or "10.0000" yuan is the order for 10.00, paid at
// the gateway as 10.00, and answered again under its key. It was kept with
// the input's scale, which page-pay refused (more than 2 decimals): a 500,
// and every retry of the key the same 500.
func TestTopUpOrderAmountAtYuanScale(t *testing.T) {
	t.Parallel()
	g, rail, _ := gateway(t)
	o := &app.TopUpOrders{Rails: map[string]app.Checkout{alipay.Name: alipay.Checkout{C: rail.C}},
		Orders: &orders{byID: map[string]app.TopUpOrder{}}, Clock: clock.System{}}
	for _, give := range []string{"10.000", "10.0000"} {
		in := app.TopUpOrderInput{RenterID: "r-1", Rail: alipay.Name, Amount: give, Currency: "CNY", IdempotencyKey: "k-" + give}
		first, err := o.Create(context.Background(), in)
		if err != nil {
			t.Fatalf("top-up of %s: %v", give, err)
		}
		if first.Amount.String() != "10" || first.Amount.Exponent() != -2 {
			t.Errorf("top-up of %s: order amount %s (exponent %d), want 10.00", give, first.Amount, first.Amount.Exponent())
		}
		again, err := o.Create(context.Background(), in)
		if err != nil || again.ID != first.ID || again.PayURL != first.PayURL {
			t.Fatalf("top-up of %s again: %+v, %v; want %+v", give, again, err, first)
		}
		paid, err := g.Pay(first.PayURL)
		if err != nil {
			t.Fatalf("top-up of %s: paying %s: %v", give, first.PayURL, err)
		}
		if got := paid.Form.Get("total_amount"); got != "10.00" {
			t.Errorf("top-up of %s: paid %q, want 10.00", give, got)
		}
	}
}
