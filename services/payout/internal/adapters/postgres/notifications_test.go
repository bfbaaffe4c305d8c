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
	// A retried notification of an earlier total (60 after 100) is nothing
	// new: recorded per distinct total, it paged again, and finance taking
	// back "the part since the last one" took it twice.
	for _, tc := range []struct {
		key, refunded  string
		fresh, refund  bool
		refundedBefore string
	}{
		{"a1", "0", true, false, "0"},
		{"a2", "30.00", false, true, "0"},
		{"a3", "30.0", false, false, "0"},
		{"a4", "100.00", false, true, "30"},
		{"a5", "60.00", false, false, "0"}, // a late retry of a total never recorded
	} {
		got := record(tc.key, tc.refunded)
		if got.Fresh != tc.fresh || got.Refund != tc.refund || got.RefundedBefore.String() != tc.refundedBefore {
			t.Errorf("%s refunded %s: %+v, want fresh %v refund %v before %s", tc.key, tc.refunded, got, tc.fresh, tc.refund, tc.refundedBefore)
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
