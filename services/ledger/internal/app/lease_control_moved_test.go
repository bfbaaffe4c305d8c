package app

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// leaseMem is a LeaseControlStore with an inbox that records the wallets
// lease control loads.
type leaseMem struct {
	seen   map[string]bool
	loaded []domain.WalletKey
}

func (m *leaseMem) WithLeaseTx(_ context.Context, fn func(LeaseControlTx) error) error { return fn(m) }

func (m *leaseMem) Claim(_ context.Context, _ string, ids []string) (map[string]bool, error) {
	fresh := map[string]bool{}
	for _, id := range ids {
		if !m.seen[id] {
			m.seen[id], fresh[id] = true, true
		}
	}
	return fresh, nil
}

func (m *leaseMem) LoadWallets(_ context.Context, keys []domain.WalletKey, _, _ time.Time) ([]domain.WalletStatus, error) {
	m.loaded = append(m.loaded, keys...)
	return nil, nil
}

func (m *leaseMem) SaveLeases(context.Context, []LeaseSave, time.Time) error   { return nil }
func (m *leaseMem) Announce(context.Context, []domain.LeaseEvent) error        { return nil }
func (m *leaseMem) Resumable(context.Context, int) ([]domain.WalletKey, error) { return nil, nil }
func (m *leaseMem) Exhausted(context.Context, time.Time, int) ([]domain.WalletKey, error) {
	return nil, nil
}

// Lease control looks at the wallets of fresh messages only — not one the
// inbox has seen, one twice in a fetch once — each wallet once, in the
// order first named.
func TestEvaluateMovedClaimsEachMessageOnce(t *testing.T) {
	t.Parallel()
	st := &leaseMem{seen: map[string]bool{"lp-old": true}}
	lc := &LeaseControl{Clock: clock.NewManual(time.Now()), Log: slog.New(slog.DiscardHandler), Store: st}
	w := func(renter string) domain.WalletKey { return domain.WalletKey{RenterID: renter, Currency: "CNY"} }
	err := lc.EvaluateMoved(context.Background(), []WalletsMoved{
		{ID: "lp-old", Wallets: []domain.WalletKey{w("r-old")}},
		{ID: "lp-1", Wallets: []domain.WalletKey{w("r-2"), w("r-1")}},
		{ID: "lp-1", Wallets: []domain.WalletKey{w("r-2"), w("r-1")}},
		{ID: "lp-2", Wallets: []domain.WalletKey{w("r-1"), w("r-3")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []domain.WalletKey{w("r-2"), w("r-1"), w("r-3")}; !reflect.DeepEqual(st.loaded, want) {
		t.Fatalf("loaded %v, want %v", st.loaded, want)
	}
}
