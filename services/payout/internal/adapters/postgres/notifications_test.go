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
	if rec, err := s.RecordNotification(ctx, "wechatpay", "n1", app.NotifyKindTopUp, "42", tu, "tx-1", now); err != nil || !rec.Fresh || rec.Refund {
		t.Fatalf("first: %+v %v", rec, err)
	}
	if seen, digest, err := s.NotificationSeen(ctx, "wechatpay", "n1"); err != nil || !seen || digest != "" {
		t.Fatalf("seen: %v %q %v", seen, digest, err)
	}
	if seen, _, err := s.NotificationSeen(ctx, "wechatpay", "n0"); err != nil || seen {
		t.Fatalf("a key never recorded seen: %v %v", seen, err)
	}
	if _, err := s.RecordNotification(ctx, "wechatpay", "n1", app.NotifyKindTopUp, "42", tu, "tx-1", now); !errors.Is(err, app.ErrReplay) {
		t.Fatalf("the same key again: %v, want ErrReplay", err)
	}
	if rec, err := s.RecordNotification(ctx, "wechatpay", "n2", app.NotifyKindTopUp, "42", tu, "tx-1", now); err != nil || rec.Fresh {
		t.Fatalf("the payment again: %+v %v, want not fresh", rec, err)
	}
	if _, err := s.RecordNotification(ctx, "wechatpay", "n3", app.NotifyKindPayout, "po_1", nil, "", now); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `select notifications from payout.rail_topups where rail = 'wechatpay' and payment_id = '42'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("notifications %d (%v), want 2 (the replay not counted)", n, err)
	}
}

// A notification's content digest is kept with its key; a refunded total
// of a payment is recorded once (the same total notified again is not a
// new refund, a larger one is), in the notification's transaction.
func TestRecordNotificationRefund(t *testing.T) {
	t.Parallel()
	pool := migratedPool(t)
	ctx := context.Background()
	s := &Store{Pool: pool}
	now := time.Now()
	tu := app.TopUp{Rail: "alipay", PaymentID: "2026", RenterID: "r-1", Currency: "CNY", Amount: decimal.RequireFromString("100.00"),
		NotificationDigest: "d1"}
	record := func(key, refunded string) app.Recorded {
		t.Helper()
		x := tu
		x.NotificationKey, x.Refunded, x.RefundedAt = key, decimal.RequireFromString(refunded), "2026-12-01 10:00:00.123"
		rec, err := s.RecordNotification(ctx, "alipay", key, app.NotifyKindTopUp, "2026", &x, "tx-1", now)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	for _, tc := range []struct {
		key, refunded string
		want          app.Recorded
	}{
		{"a1", "0", app.Recorded{Fresh: true}},
		{"a2", "30.00", app.Recorded{Refund: true}},
		{"a3", "30.0", app.Recorded{}},
		{"a4", "100.00", app.Recorded{Refund: true}},
	} {
		if got := record(tc.key, tc.refunded); got != tc.want {
			t.Errorf("%s refunded %s: %+v, want %+v", tc.key, tc.refunded, got, tc.want)
		}
	}
	if seen, digest, err := s.NotificationSeen(ctx, "alipay", "a1"); err != nil || !seen || digest != "d1" {
		t.Errorf("seen %v digest %q %v, want d1", seen, digest, err)
	}
	var got string
	if err := pool.QueryRow(ctx, `select string_agg(refunded_total::numeric(20, 2)::text || ' ' || notification_key || ' ' || refunded_at, ',' order by refunded_total)
		from payout.rail_refunds`).Scan(&got); err != nil || got != "30.00 a2 2026-12-01 10:00:00.123,100.00 a4 2026-12-01 10:00:00.123" {
		t.Errorf("refunds %q %v", got, err)
	}
}
