package app

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// memStore is an in-memory Store: one rate card, an inbox, and the charges
// and pending usage each rating transaction wrote.
type memStore struct {
	Store  // the card listing the rating never calls
	card   domain.StoredCard
	seen   map[string]bool
	rated  []domain.Charge
	held   []domain.PendingUsage
	models []domain.GPUModelVersion
}

func (s *memStore) WithTx(_ context.Context, fn func(Tx) error) error { return fn(memTx{s}) }
func (s *memStore) CardsSeq(context.Context) (int64, error)           { return s.card.Seq, nil }
func (s *memStore) AllCards(context.Context) ([]domain.StoredCard, int64, error) {
	return []domain.StoredCard{s.card}, s.card.Seq, nil
}

type memTx struct{ s *memStore }

func (memTx) LockRating(context.Context) error { return nil }

func (t memTx) Claim(_ context.Context, _ string, ids []string) (map[string]bool, error) {
	fresh := map[string]bool{}
	for _, id := range ids {
		if !t.s.seen[id] {
			t.s.seen[id], fresh[id] = true, true
		}
	}
	return fresh, nil
}

func (memTx) TakePending(context.Context, []string) (map[string]bool, error) { return nil, nil }
func (memTx) TierUsage(context.Context, []domain.RenterMonth) (map[domain.RenterMonth]int64, error) {
	return map[domain.RenterMonth]int64{}, nil
}
func (memTx) SaveTierUsage(context.Context, map[domain.RenterMonth]int64) error { return nil }
func (memTx) LeaseTotals(context.Context, []domain.LeaseCurrency) (map[domain.LeaseCurrency]domain.LeaseTotal, error) {
	return map[domain.LeaseCurrency]domain.LeaseTotal{}, nil
}
func (memTx) SaveLeaseTotals(context.Context, map[domain.LeaseCurrency]domain.LeaseTotal, time.Time) error {
	return nil
}
func (t memTx) InsertCharges(_ context.Context, cs []domain.Charge, _ time.Time) error {
	t.s.rated = append(t.s.rated, cs...)
	return nil
}
func (t memTx) AddPending(_ context.Context, ps []domain.PendingUsage, _ time.Time) error {
	t.s.held = append(t.s.held, ps...)
	return nil
}
func (memTx) PublishCharges(context.Context, []domain.ChargeBatch) error { return nil }
func (t memTx) ApplyGPUModels(_ context.Context, vs []domain.GPUModelVersion) error {
	t.s.models = append(t.s.models, vs...)
	return nil
}

// A fetch can hold the same message twice (a redelivery after the ack wait
// arriving beside the first delivery): the inbox claims its id fresh once,
// and its events are rated once.
func TestSameMessageTwiceInOneFetchRatesOnce(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &memStore{seen: map[string]bool{}, card: domain.StoredCard{ID: "rc-1", Currency: "CNY", EffectiveFrom: from, Seq: 1,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}}}
	a := New(st, nil, clock.NewManual(from.Add(48*time.Hour)))
	end := from.Add(24 * time.Hour)
	ev := domain.UsageEvent{ID: "ev-dup", LeaseID: "lease-dup", ProviderID: "p-000", RenterID: "r-000", GPUModel: "RTX_4090",
		GPUCount: 1, Start: end.Add(-time.Hour), End: end, Currency: "CNY", CycleID: "c-1"}
	msg := UsageMessage{ID: "ub-dup", Events: []domain.UsageEvent{ev}}
	if err := a.RateMessages(context.Background(), []UsageMessage{msg, msg}); err != nil {
		t.Fatal(err)
	}
	if len(st.held) != 0 {
		t.Fatalf("pending %+v, want the event priced", st.held)
	}
	if len(st.rated) != 1 || len(st.rated[0].EventIDs) != 1 || st.rated[0].Amount.String() != "2.8" {
		var got []string
		for _, c := range st.rated {
			got = append(got, c.Amount.String())
			got = append(got, c.EventIDs...)
		}
		t.Fatalf("charged %v; want ev-dup once for 2.80 (1 GPU-hour at 2.80)", got)
	}
}

// The GPU catalogue's read model applies each fresh gpu_model.updated once:
// not one the inbox has seen, and one twice in a fetch once.
func TestGPUModelMessagesApplyOnce(t *testing.T) {
	t.Parallel()
	st := &memStore{seen: map[string]bool{"gm-old": true}}
	a := New(st, nil, clock.NewManual(time.Now()))
	msg := func(id, model string) GPUModelMessage {
		return GPUModelMessage{ID: id, Version: domain.GPUModelVersion{ID: model, Version: 2}}
	}
	if err := a.ApplyGPUModels(context.Background(), []GPUModelMessage{msg("gm-old", "A100"), msg("gm-1", "H100"), msg("gm-1", "H100")}); err != nil {
		t.Fatal(err)
	}
	if len(st.models) != 1 || st.models[0].ID != "H100" {
		t.Fatalf("applied %+v, want H100 once", st.models)
	}
}
