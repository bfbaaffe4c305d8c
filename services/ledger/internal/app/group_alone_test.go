package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// errPostedAlone is routeStore's answer to WithTx: the write went the
// one-at-a-time path (or a group's WithTx), not PostNew.
var errPostedAlone = errors.New("WithTx")

// routeStore records the transactions handed to a group's one-round-trip
// write (PostNew) and answers every write without writing.
type routeStore struct {
	Store
	grouped []string // idempotency keys PostNew was given
}

func (s *routeStore) PostNew(_ context.Context, txs []*domain.Transaction, _ []Audited) ([]domain.BalanceChange, error) {
	for _, t := range txs {
		s.grouped = append(s.grouped, t.IdempotencyKey)
	}
	return nil, ErrUsePost
}

func (s *routeStore) WithTx(context.Context, func(Tx) error) error { return errPostedAlone }

// A bad debt write-off and a renter's refund are judged on the wallet's
// balance before their commit (checkWriteOffs, checkRefunds), by postOne
// alone: a group's write (PostNew, or commitGroup's Post) judges neither,
// and took a write-off of an open renter's wallet above zero, or a second
// refund of the same balance, unchecked. The group path posts them alone
// whoever queues them; other entries (the control) are grouped.
func TestWriteOffAndRenterRefundNeverGrouped(t *testing.T) {
	t.Parallel()
	entry := func(key string, md map[string]string, debit, credit string) *domain.Transaction {
		ps, vs := domain.ParsePostings([]domain.RawPosting{
			{Account: debit, Direction: "debit", Amount: "10.00", Currency: "CNY"},
			{Account: credit, Direction: "credit", Amount: "10.00", Currency: "CNY"},
		})
		kind, kvs := houseEntryKind(md, ps)
		if vs = append(vs, kvs...); len(vs) > 0 {
			t.Fatalf("%s: %v", key, vs)
		}
		return &domain.Transaction{ID: "tx-" + key, IdempotencyKey: key, Kind: kind, Metadata: md, Postings: ps}
	}
	for _, tt := range []struct {
		give        *domain.Transaction
		wantGrouped bool
	}{
		{entry("write-off", map[string]string{"kind": domain.KindBadDebtWriteOff, "reason": "left owing"}, domain.PlatformBadDebt, "renter:r-1:wallet"), false},
		{entry("refund", nil, "renter:r-1:wallet", domain.BankClient), false},
		{entry("rail-refund", map[string]string{"kind": domain.KindRailRefund, "external_ref": "alipay:T1"}, "renter:r-1:wallet", domain.BankClient), false},
		{entry("wallet-move", nil, "renter:r-1:wallet", "renter:r-2:wallet"), false},
		{entry("manual", nil, "provider:p-1:available", "provider:p-1:in_transit"), true},
		{entry("deposit", nil, domain.BankClient, "renter:r-1:wallet"), true},
	} {
		store := &routeStore{}
		a := New(store, clock.System{}, cycles.Calendar{}, slog.New(slog.DiscardHandler))
		_, err := a.postGrouped(context.Background(), tt.give, Audited{})
		if !errors.Is(err, errPostedAlone) {
			t.Fatalf("%s: %v, want the store's WithTx answer", tt.give.IdempotencyKey, err)
		}
		if got := len(store.grouped) > 0; got != tt.wantGrouped {
			t.Errorf("%s: given to a group's PostNew %v (%v), want %v", tt.give.IdempotencyKey, got, store.grouped, tt.wantGrouped)
		}
	}
}
