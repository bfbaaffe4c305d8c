package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// pendStore is memStore with cards added at will and the pending usage
// kept in the order it began to wait (the page cursor is the last event
// id read).
type pendStore struct {
	memStore
	cards   []domain.StoredCard
	pending []domain.PendingUsage
}

func (s *pendStore) CardsSeq(context.Context) (int64, error) { return int64(len(s.cards)), nil }
func (s *pendStore) AllCards(context.Context) ([]domain.StoredCard, int64, error) {
	return s.cards, int64(len(s.cards)), nil
}
func (s *pendStore) Pending(_ context.Context, _ time.Time, afterID string, limit int) ([]domain.PendingUsage, time.Time, string, error) {
	from := 0
	if afterID != "" {
		for i, p := range s.pending {
			if p.Event.ID == afterID {
				from = i + 1
			}
		}
	}
	page := s.pending[from:min(from+limit, len(s.pending))]
	if len(page) == 0 {
		return nil, time.Time{}, "", nil
	}
	return page, time.Time{}, page[len(page)-1].Event.ID, nil
}
func (s *pendStore) WithTx(_ context.Context, fn func(Tx) error) error {
	return fn(pendTx{memTx{&s.memStore}, s})
}

type pendTx struct {
	memTx
	p *pendStore
}

func (t pendTx) AddPending(_ context.Context, ps []domain.PendingUsage, _ time.Time) error {
	t.p.pending = append(t.p.pending, ps...)
	return nil
}
func (t pendTx) TakePending(_ context.Context, ids []string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string]bool{}
	keep := t.p.pending[:0:0]
	for _, p := range t.p.pending {
		if want[p.Event.ID] {
			out[p.Event.ID] = true
			continue
		}
		keep = append(keep, p)
	}
	t.p.pending = keep
	return out, nil
}

// Usage a new card prices is rated even behind a full page of usage still
// waiting for another card: the retry read only the first page, found
// nothing to rate there and stopped, so the CNY event below waited for as
// long as the JPY events before it did.
func TestRetryPendingReadsPastUsageNoCardPrices(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &pendStore{memStore: memStore{seen: map[string]bool{}}}
	a := New(st, nil, clock.NewManual(from.Add(48*time.Hour)))
	ev := func(id, cur string) domain.UsageEvent {
		return domain.UsageEvent{ID: id, LeaseID: "l-" + id, ProviderID: "p-1", RenterID: "r-1", GPUModel: "RTX_4090", GPUCount: 1,
			Start: from.Add(time.Hour), End: from.Add(2 * time.Hour), Currency: cur, CycleID: "cyc-20260101"}
	}
	var jpy []domain.UsageEvent
	for i := range pendingRetryMax {
		jpy = append(jpy, ev(fmt.Sprintf("jpy-%05d", i), "JPY"))
	}
	ctx := context.Background()
	if err := a.RateMessages(ctx, []UsageMessage{{ID: "m-1", Events: jpy}}); err != nil {
		t.Fatal(err)
	}
	if err := a.RateMessages(ctx, []UsageMessage{{ID: "m-2", Events: []domain.UsageEvent{ev("cny-1", "CNY")}}}); err != nil {
		t.Fatal(err)
	}
	if len(st.pending) != pendingRetryMax+1 || len(st.rated) != 0 {
		t.Fatalf("%d pending, %d charges before the card; want %d and none", len(st.pending), len(st.rated), pendingRetryMax+1)
	}
	st.cards = append(st.cards, domain.StoredCard{ID: "rc-cny", Currency: "CNY", EffectiveFrom: from, Seq: 1,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}})
	n, err := a.RetryPending(ctx)
	if err != nil || n != 1 || len(st.rated) != 1 || len(st.pending) != pendingRetryMax {
		t.Fatalf("retry rated %d (%v), %d charges, %d pending; want the CNY event rated and the JPY ones waiting", n, err, len(st.rated), len(st.pending))
	}
	if n, err := a.RetryPending(ctx); err != nil || n != 0 {
		t.Fatalf("a second retry rated %d (%v), want none", n, err)
	}
}
