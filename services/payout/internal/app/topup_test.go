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
	keys   map[string]bool
	topups map[string]int
}

func (m *memNotifications) NotificationSeen(_ context.Context, rail, key string) (bool, error) {
	return m.keys[rail+"/"+key], nil
}

func (m *memNotifications) RecordNotification(_ context.Context, rail, key, _, _ string, t *TopUp, _ string, _ time.Time) (bool, error) {
	if key != "" {
		if m.keys[rail+"/"+key] {
			return false, ErrReplay
		}
		m.keys[rail+"/"+key] = true
	}
	if t == nil {
		return true, nil
	}
	m.topups[t.ExternalRef()]++
	return m.topups[t.ExternalRef()] == 1, nil
}

// A payment is deposited once: its first notification is accepted, another
// notification of it is a duplicate, the same notification again a replay;
// a ledger outage leaves the notification's key free for the rail's retry,
// and the same payment id with another amount is refused.
func TestTopUpApply(t *testing.T) {
	ledger := &memDeposits{byRef: map[string]decimal.Decimal{}}
	store := &memNotifications{keys: map[string]bool{}, topups: map[string]int{}}
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
	if len(ledger.byRef) != 1 || !ledger.byRef["wechatpay:4200001"].Equal(pay.Amount) {
		t.Errorf("deposits %v, want one of 88.80 under wechatpay:4200001", ledger.byRef)
	}
}
