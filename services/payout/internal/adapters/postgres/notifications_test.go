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

// A refund of a rail that notifies each refund with its own amount
// (WeChat Pay) is recorded once per refund id, its row carrying the
// payment's refunded total with it: a second refund of the same amount is
// a rise (as a notified total it was nothing new). The id again with the
// same digest is the rail's retry (nothing new, no error); with another
// digest or under another payment it is ErrReplay, and nothing of that
// notification is kept (its key stays free).
func TestRecordNotificationRefundByID(t *testing.T) {
	t.Parallel()
	pool := migratedPool(t)
	ctx := context.Background()
	s := &Store{Pool: pool}
	now := time.Now()
	record := func(key, payment, refundID, amount, digest string) (app.Recorded, error) {
		t.Helper()
		x := app.TopUp{Rail: "wechatpay", PaymentID: payment, RenterID: "r-1", Currency: "CNY", Amount: decimal.RequireFromString("100.00"),
			NotificationKey: key, Refunded: decimal.RequireFromString(amount), RefundedAt: "2026-12-01T10:00:00+08:00", RefundID: refundID, RefundDigest: digest}
		return s.RecordNotification(ctx, "wechatpay", key, app.NotifyKindTopUp, payment, &x, "tx-"+payment, now)
	}
	for _, tc := range []struct {
		key, payment, refundID, amount, digest string
		refund                                 bool
		before, total                          string
		wantErr                                error
	}{
		{"n1", "42", "rf1", "10.00", "d1", true, "0", "10", nil},
		{"n2", "42", "rf2", "10.00", "d2", true, "10", "20", nil},
		{"n3", "42", "rf1", "10.00", "d1", false, "0", "0", nil},
		{"n4", "42", "rf1", "15.00", "d1x", false, "0", "0", app.ErrReplay},
		{"n5", "43", "rf2", "10.00", "d2", false, "0", "0", app.ErrReplay},
		{"n6", "43", "rf3", "100.00", "d3", true, "0", "100", nil},
	} {
		got, err := record(tc.key, tc.payment, tc.refundID, tc.amount, tc.digest)
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("%s: %v, want %v", tc.key, err, tc.wantErr)
			continue
		}
		if err == nil && (got.Refund != tc.refund || got.RefundedBefore.String() != tc.before || got.RefundedTotal.String() != tc.total) {
			t.Errorf("%s: %+v, want refund %v before %s total %s", tc.key, got, tc.refund, tc.before, tc.total)
		}
	}
	for key, want := range map[string]bool{"n3": true, "n4": false, "n5": false} {
		if seen, _, err := s.NotificationSeen(ctx, "wechatpay", key); err != nil || seen != want {
			t.Errorf("key %s seen %v (%v), want %v", key, seen, err, want)
		}
	}
	var got string
	if err := pool.QueryRow(ctx, `select string_agg(payment_id || ' ' || refunded_total::numeric(20, 2)::text || ' ' || refund_id || ' ' || content_digest || ' ' || notification_key,
		',' order by payment_id, refunded_total) from payout.rail_refunds`).Scan(&got); err != nil ||
		got != "42 10.00 rf1 d1 n1,42 20.00 rf2 d2 n2,43 100.00 rf3 d3 n6" {
		t.Errorf("refunds %q %v", got, err)
	}
}
