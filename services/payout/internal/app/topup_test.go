package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
)

// memDeposits is the ledger's deposit path in memory: idempotent on the
// external reference, refusing the same reference with another amount.
type memDeposits struct {
	byRef map[string]decimal.Decimal
	down  bool
}

func (m *memDeposits) Deposit(_ context.Context, renter, currency string, amount decimal.Decimal, ref string) (string, error) {
	if m.down {
		return "", errors.New("ledger unavailable")
	}
	if got, ok := m.byRef[ref]; ok {
		if !got.Equal(amount) {
			return "", fmt.Errorf("%s: %w", ref, ErrDepositRefused)
		}
		return "tx-" + ref, nil
	}
	m.byRef[ref] = amount
	return "tx-" + ref, nil
}

type memNotifications struct {
	keys    map[string]string // digest by rail/key
	topups  map[string]int
	refunds map[string]bool
}

func (m *memNotifications) NotificationSeen(_ context.Context, rail, key string) (bool, string, error) {
	d, ok := m.keys[rail+"/"+key]
	return ok, d, nil
}

func (m *memNotifications) RecordNotification(_ context.Context, rail, key, _, _ string, t *TopUp, _ string, _ time.Time) (Recorded, error) {
	if key != "" {
		if _, ok := m.keys[rail+"/"+key]; ok {
			return Recorded{}, ErrReplay
		}
		m.keys[rail+"/"+key] = ""
		if t != nil {
			m.keys[rail+"/"+key] = t.NotificationDigest
		}
	}
	if t == nil {
		return Recorded{Fresh: true}, nil
	}
	m.topups[t.ExternalRef()]++
	rec := Recorded{Fresh: m.topups[t.ExternalRef()] == 1}
	if t.Refunded.IsPositive() {
		ref := t.ExternalRef() + "/" + t.Refunded.String()
		rec.Refund = !m.refunds[ref]
		m.refunds[ref] = true
	}
	return rec, nil
}

// A payment is deposited once: its first notification is accepted, another
// notification of it is a duplicate, the same notification again a replay;
// a ledger outage leaves the notification's key free for the rail's retry,
// and the same payment id with another amount is refused. A rail's resend
// (same key, same digest) is a duplicate; a refund is refunded once per
// total and never deposits again.
func TestTopUpApply(t *testing.T) {
	ledger := &memDeposits{byRef: map[string]decimal.Decimal{}}
	store := &memNotifications{keys: map[string]string{}, topups: map[string]int{}, refunds: map[string]bool{}}
	a := &TopUps{Ledger: ledger, Store: store, Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	pay := TopUp{Rail: "wechatpay", PaymentID: "4200001", RenterID: "r-1", Currency: "CNY", Amount: decimal.RequireFromString("88.80"), NotificationKey: "n1"}
	step := func(name string, tu TopUp, want string) {
		t.Helper()
		got, err := a.Apply(ctx, tu)
		if got != want {
			t.Errorf("%s: %s (%v), want %s", name, got, err, want)
		}
	}
	ledger.down = true
	step("ledger down", pay, NotifyFailed)
	ledger.down = false
	step("first (the retry after the outage)", pay, NotifyAccepted)
	step("the same notification again", pay, NotifyReplay)
	again := pay
	again.NotificationKey = "n2"
	step("the payment notified again", again, NotifyDuplicate)
	other := pay
	other.NotificationKey, other.Amount = "n3", decimal.RequireFromString("1.00")
	step("the payment id with another amount", other, NotifyRejected)
	// A rail that resends a notification under its key (Alipay): the same
	// content is the resend, a duplicate; other content a replay.
	sent := pay
	sent.NotificationKey, sent.NotificationDigest = "a1", "d1"
	step("a notification with a digest", sent, NotifyDuplicate)
	step("the rail's resend of it", sent, NotifyDuplicate)
	changed := sent
	changed.NotificationDigest = "d2"
	step("its key with other content", changed, NotifyReplay)
	// A refund made at the rail: recorded once per refunded total.
	refund := pay
	refund.NotificationKey, refund.Refunded = "r1", decimal.RequireFromString("8.80")
	step("a refund", refund, NotifyRefunded)
	refund.NotificationKey = "r2"
	step("the same refund notified again", refund, NotifyDuplicate)
	refund.NotificationKey, refund.Refunded = "r3", pay.Amount
	step("the rest refunded", refund, NotifyRefunded)
	if len(ledger.byRef) != 1 || !ledger.byRef["wechatpay:4200001"].Equal(pay.Amount) {
		t.Errorf("deposits %v, want one of 88.80 under wechatpay:4200001", ledger.byRef)
	}
}

// refusingNotifications is memNotifications whose RecordNotification
// answers err when set.
type refusingNotifications struct {
	memNotifications
	err error
}

func (m *refusingNotifications) RecordNotification(ctx context.Context, rail, key, kind, ref string, t *TopUp, tx string, at time.Time) (Recorded, error) {
	if m.err != nil {
		return Recorded{}, m.err
	}
	return m.memNotifications.RecordNotification(ctx, rail, key, kind, ref, t, tx, at)
}

// A refund made at the rail that cannot be recorded is refused to the rail,
// never acknowledged: its payment's deposit refused by the ledger for good
// (the trade deposited under its reference at another amount), counted
// rejected (GpubillTopUpNotApplied pages); its refund id recorded with other
// content, a replay; the database failing, failed, so the rail sends it
// again. Acknowledged (refunded, duplicate or accepted), the rail never
// sends it again (WeChat Pay's REFUND.SUCCESS is sent until acknowledged,
// then never): the refund is in no payout.rail_refunds row, no page, and
// the wallet keeps the money the renter got back.
func TestTopUpRefundRefusedIsNotAcknowledged(t *testing.T) {
	ctx := context.Background()
	ledger := &memDeposits{byRef: map[string]decimal.Decimal{"wechatpay:4200009": decimal.RequireFromString("50.00")}}
	store := &refusingNotifications{memNotifications: memNotifications{keys: map[string]string{}, topups: map[string]int{}, refunds: map[string]bool{}}}
	a := &TopUps{Ledger: ledger, Store: store, Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}
	refund := TopUp{Rail: "wechatpay", PaymentID: "4200009", RenterID: "r-1", Currency: "CNY", Amount: decimal.RequireFromString("88.80"),
		NotificationKey: "rf-1", Refunded: decimal.RequireFromString("8.80"), RefundID: "50302", RefundDigest: "d1"}
	for _, tc := range []struct {
		name      string
		give      func() TopUp
		storeErr  error
		want      string
		wantErrIs error
	}{
		{"its payment's deposit refused by the ledger", func() TopUp { return refund }, nil, NotifyRejected, ErrDepositRefused},
		{"its refund id recorded with other content", func() TopUp {
			r := refund
			r.PaymentID, r.Amount, r.NotificationKey = "4200010", decimal.RequireFromString("50.00"), "rf-2"
			return r
		}, fmt.Errorf("refund 50302 of wechatpay:4200010: %w", ErrReplay), NotifyReplay, ErrReplay},
		{"the database failing as it is recorded", func() TopUp {
			r := refund
			r.PaymentID, r.Amount, r.NotificationKey = "4200011", decimal.RequireFromString("50.00"), "rf-3"
			return r
		}, errors.New("conn closed"), NotifyFailed, nil},
	} {
		store.err = tc.storeErr
		got, err := a.Apply(ctx, tc.give())
		if got != tc.want || err == nil || (tc.wantErrIs != nil && !errors.Is(err, tc.wantErrIs)) {
			t.Errorf("%s: answered %s (%v); want %s with its error (%v): the rail sends a refund again only when it is refused", tc.name, got, err, tc.want, tc.wantErrIs)
		}
	}
	if len(store.refunds) != 0 || len(store.keys) != 0 {
		t.Errorf("recorded refunds %v, keys %v; want none: none was applied", store.refunds, store.keys)
	}
}
