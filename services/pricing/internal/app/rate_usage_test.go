package app

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
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

// classify names every tier month and lease of a fetch, whatever the order
// of its events: it skips the sets for an event whose renter and months, or
// lease, the event before it already added, so runs of one renter with
// events ending exactly on a month's first instant, spanning two months or
// going back in time are checked against the months of each event.
func TestClassifyNamesEveryTierMonthAndLease(t *testing.T) {
	t.Parallel()
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &memStore{seen: map[string]bool{}, card: domain.StoredCard{ID: "rc-1", Currency: "CNY", EffectiveFrom: from, Seq: 1,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}}}
	a := New(st, nil, clock.NewManual(from.Add(400*24*time.Hour)))
	book, err := a.Book(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	edges := []time.Time{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	for round := 0; round < 300; round++ {
		var items []item
		for i := 0; i < 1+rng.IntN(12); i++ {
			end := edges[rng.IntN(len(edges))].Add([]time.Duration{0, time.Nanosecond, time.Hour, -time.Hour, 10 * 24 * time.Hour}[rng.IntN(5)])
			start := end.Add(-[]time.Duration{time.Minute, time.Hour, 3 * time.Hour, 23 * time.Hour}[rng.IntN(4)])
			ev := &domain.UsageEvent{ID: fmt.Sprintf("ev-%d", i), LeaseID: fmt.Sprintf("l-%d", rng.IntN(3)), ProviderID: "p-0",
				RenterID: fmt.Sprintf("r-%d", rng.IntN(2)), GPUModel: "RTX_4090", GPUCount: 1, Start: start, End: end, Currency: "CNY", CycleID: "c-1"}
			items = append(items, item{source: "m", ev: ev})
		}
		wantMonths, wantLeases := map[domain.RenterMonth]bool{}, map[domain.LeaseCurrency]bool{}
		for _, it := range items {
			for _, m := range domain.Months(it.ev.Start, it.ev.End) {
				wantMonths[domain.RenterMonth{RenterID: it.ev.RenterID, Month: m}] = true
			}
			wantLeases[domain.LeaseCurrency{LeaseID: it.ev.LeaseID, Currency: "CNY"}] = true
		}
		_, pending, months, leases := classify(book, items)
		if len(pending) != 0 {
			t.Fatalf("round %d: %d events pending: %+v", round, len(pending), pending[0])
		}
		gotMonths, gotLeases := map[domain.RenterMonth]bool{}, map[domain.LeaseCurrency]bool{}
		for _, m := range months {
			gotMonths[m] = true
		}
		for _, l := range leases {
			gotLeases[l] = true
		}
		if !maps.Equal(gotMonths, wantMonths) || !maps.Equal(gotLeases, wantLeases) {
			t.Fatalf("round %d: months %v and leases %v, want %v and %v", round, months, leases, wantMonths, wantLeases)
		}
	}
}
