package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// A notification key is recorded once (again: app.ErrReplay, and the
// top-up it came with is not counted); a payment's top-up is fresh once,
// later notifications of it count.
func TestRecordNotification(t *testing.T) {
	t.Parallel()
	pool := migratedPool(t)
	ctx := context.Background()
	s := &Store{Pool: pool}
	now := time.Now()
	tu := &app.TopUp{Rail: "wechatpay", PaymentID: "42", RenterID: "r-1", Currency: "CNY", Amount: decimal.RequireFromString("10.00")}
	if fresh, err := s.RecordNotification(ctx, "wechatpay", "n1", app.NotifyKindTopUp, "42", tu, "tx-1", now); err != nil || !fresh {
		t.Fatalf("first: %v %v", fresh, err)
	}
	if seen, err := s.NotificationSeen(ctx, "wechatpay", "n1"); err != nil || !seen {
		t.Fatalf("seen: %v %v", seen, err)
	}
	if _, err := s.RecordNotification(ctx, "wechatpay", "n1", app.NotifyKindTopUp, "42", tu, "tx-1", now); !errors.Is(err, app.ErrReplay) {
		t.Fatalf("the same key again: %v, want ErrReplay", err)
	}
	if fresh, err := s.RecordNotification(ctx, "wechatpay", "n2", app.NotifyKindTopUp, "42", tu, "tx-1", now); err != nil || fresh {
		t.Fatalf("the payment again: %v %v, want not fresh", fresh, err)
	}
	if _, err := s.RecordNotification(ctx, "wechatpay", "n3", app.NotifyKindPayout, "po_1", nil, "", now); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `select notifications from payout.rail_topups where rail = 'wechatpay' and payment_id = '42'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("notifications %d (%v), want 2 (the replay not counted)", n, err)
	}
}
