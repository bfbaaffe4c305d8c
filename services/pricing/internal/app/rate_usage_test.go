package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
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

// flatCardStore is a memStore whose one card, in force from from, prices
// an RTX_4090 at 2.80 CNY an hour, without bands or tiers.
func flatCardStore(from time.Time) *memStore {
	return &memStore{seen: map[string]bool{}, card: domain.StoredCard{ID: "rc-1", Currency: "CNY", EffectiveFrom: from, Seq: 1,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}}}
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
	st := flatCardStore(from)
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
	st := flatCardStore(from)
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

// A fetch holding thousands of events of one lease (an agent flushing a
// week's spool of per-minute events) is charged in charges of at most
// chargeEventsMax events each, every event once, the amounts adding up to
// the lease's exact total: one charge carried every event id, over a MiB
// with long ids, and NATS refused it for good (dead-lettered with every
// charge of its batch, the usage billed in pricing and never in the ledger).
func TestManyEventsOfOneLeaseMakeBoundedCharges(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := flatCardStore(from)
	a := New(st, nil, clock.NewManual(from.Add(30*24*time.Hour)))
	const n = 10080 // a week of minutes
	var msgs []UsageMessage
	for m := range 2 {
		msg := UsageMessage{ID: fmt.Sprintf("ub-%d", m)}
		for i := m * n / 2; i < (m+1)*n/2; i++ {
			start := from.Add(time.Duration(i) * time.Minute)
			id := fmt.Sprintf("ev-%0124d", i) // 128 characters
			msg.Events = append(msg.Events, domain.UsageEvent{ID: id, LeaseID: "lease-spool", ProviderID: "p-000", RenterID: "r-000",
				GPUModel: "RTX_4090", GPUCount: 1, Start: start, End: start.Add(time.Minute), Currency: "CNY", CycleID: "c-1"})
		}
		msgs = append(msgs, msg)
	}
	if err := a.RateMessages(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	total, seen, ids := decimal.Zero, map[string]bool{}, map[string]bool{}
	for _, c := range st.rated {
		idBytes := 0
		for _, e := range c.EventIDs {
			idBytes += len(e) + 3 // a repeated string's tag and length on the wire
		}
		if idBytes > 512<<10 { // half of NATS's default max_payload: room for the charge's lines
			t.Errorf("charge %s carries %d events, %d bytes of ids", c.ID, len(c.EventIDs), idBytes)
		}
		if ids[c.ID] {
			t.Errorf("charge id %s twice", c.ID)
		}
		ids[c.ID] = true
		total = total.Add(c.Amount)
		for _, e := range c.EventIDs {
			if seen[e] {
				t.Errorf("event %s in two charges", e)
			}
			seen[e] = true
		}
	}
	// The first chunk keeps the id a charge of the lease always had (a
	// redelivery rated by older code names the same charge).
	if want := hashID("chg", "ub-0", "lease-spool", "CNY", "c-1"); len(st.rated) == 0 || st.rated[0].ID != want {
		t.Errorf("the first charge's id is not the lease's charge id %s", want)
	}
	if len(seen) != n || !total.Equal(decimal.RequireFromString("470.40")) {
		t.Fatalf("%d charges for %d of %d events, %s in all; want every event once, 470.40 (10080 GPU-minutes at 2.80/h)", len(st.rated), len(seen), n, total)
	}
}

// A card stored before today's checks refused its shape is priced as it
// was when stored: a band in "Local" (time.LoadLocation's name for the
// host's zone, which the older code used) is read in the process's zone. It
// failed the whole book ("stored rate card … no longer valid"), so every
// usage.recorded message of every currency was dead-lettered.
func TestStoredCardWithALocalBandStillRates(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := flatCardStore(from)
	st.card.Body.Bands = []domain.BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Local", Multiplier: "0.8"}}
	a := New(st, nil, clock.NewManual(from.Add(60*24*time.Hour)))
	// An hour from 23:00 and one from 12:00 on the host's wall clock: in the
	// band and outside it whatever TZ the test runs in (no zone moves its
	// clocks on 15 January).
	at := func(id string, hour int) domain.UsageEvent {
		start := time.Date(2026, 1, 15, hour, 0, 0, 0, time.Local).UTC()
		return domain.UsageEvent{ID: id, LeaseID: "lease-" + id, ProviderID: "p-000", RenterID: "r-000", GPUModel: "RTX_4090",
			GPUCount: 1, Start: start, End: start.Add(time.Hour), Currency: "CNY", CycleID: "c-1"}
	}
	msg := UsageMessage{ID: "ub-local", Events: []domain.UsageEvent{at("night", 23), at("day", 12)}}
	if err := a.RateMessages(context.Background(), []UsageMessage{msg}); err != nil {
		t.Fatal(err)
	}
	if len(st.held) != 0 {
		t.Fatalf("pending %+v, want both events priced", st.held)
	}
	got := map[string]string{}
	for _, c := range st.rated {
		for _, id := range c.EventIDs {
			got[id] = c.Amount.String()
		}
	}
	// 1 GPU-hour at 2.80, ×0.8 in the night band.
	if want := map[string]string{"night": "2.24", "day": "2.8"}; !maps.Equal(got, want) {
		t.Fatalf("charged %v, want %v", got, want)
	}
}

// A card stored with bands that share an hour (before a new card's were
// refused) still loads and prices as it did, the first listed band holding
// the shared hour, in rating and in quotes; a new card with those bands is
// refused, naming the band that overlaps and the band it overlaps.
func TestStoredCardWithOverlappingBandsStillRates(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := flatCardStore(from)
	st.card.Body.Bands = []domain.BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"},
		{Name: "peak", Start: "06:00", End: "09:00", TimeZone: "Asia/Shanghai", Multiplier: "1.50"}}
	a := New(st, seededCatalogue{}, clock.NewManual(from.Add(60*24*time.Hour)))
	a.Splits = halfSplit{}
	shared := time.Date(2026, 1, 14, 22, 0, 0, 0, time.UTC) // 06:00 on 15 January in Asia/Shanghai
	ev := func(id string, start time.Time) domain.UsageEvent {
		return domain.UsageEvent{ID: id, LeaseID: "lease-" + id, ProviderID: "p-000", RenterID: "r-000", GPUModel: "RTX_4090",
			GPUCount: 1, Start: start, End: start.Add(time.Hour), Currency: "CNY", CycleID: "c-1"}
	}
	msg := UsageMessage{ID: "ub-overlap", Events: []domain.UsageEvent{ev("shared", shared), ev("peak", shared.Add(time.Hour))}}
	if err := a.RateMessages(context.Background(), []UsageMessage{msg}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range st.rated {
		for _, id := range c.EventIDs {
			got[id] = c.Amount.String()
		}
	}
	// 1 GPU-hour at 2.80: ×0.80 at night (listed first), ×1.50 at peak.
	if want := map[string]string{"shared": "2.24", "peak": "4.2"}; len(st.held) != 0 || !maps.Equal(got, want) {
		t.Fatalf("charged %v (pending %+v), want %v", got, st.held, want)
	}
	q, err := a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1", StartTime: &shared})
	if err != nil || q.RenterPrice != "2.24" || len(q.Lines) != 1 || q.Lines[0].Band != "night" {
		t.Fatalf("quote of the shared hour: %+v, %v; want 2.24 at night", q, err)
	}
	in := st.card.Body
	in.ID, in.EffectiveFrom = "rc-2", from.Add(31*24*time.Hour)
	ins := &insertStore{memStore: st}
	a.Store = ins
	var inv *apperr.InvalidError
	if _, err := a.CreateRateCard(context.Background(), in); !errors.As(err, &inv) || len(inv.Violations) != 1 ||
		inv.Violations[0].Field != "time_bands[1]" || !strings.Contains(inv.Violations[0].Reason, "time_bands[0]") || len(ins.inserted) != 0 {
		t.Fatalf("a new card with those bands: %v, %d stored; want refused on time_bands[1], naming time_bands[0], none stored", err, len(ins.inserted))
	}
}

// insertStore is a memStore that keeps the cards created.
type insertStore struct {
	*memStore
	inserted []domain.StoredCard
}

func (s *insertStore) InsertCard(_ context.Context, c domain.StoredCard) (bool, error) {
	s.inserted = append(s.inserted, c)
	return true, nil
}
func (s *insertStore) Card(context.Context, string) (domain.StoredCard, error) {
	return s.inserted[len(s.inserted)-1], nil
}

// A stored card no version can read is set aside alone: usage it would
// price waits as pending, naming it (never priced by the card before it),
// and every other card still rates. (Not parallel: it reads the gauge
// every book load sets.)
func TestUnreadableStoredCardWaitsAlone(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bad := from.Add(10 * 24 * time.Hour)
	card := func(id, cur string, at time.Time, seq int64, hourly string) domain.StoredCard {
		return domain.StoredCard{ID: id, Currency: cur, EffectiveFrom: at, Seq: seq,
			Body: domain.CardInput{Currency: cur, EffectiveFrom: at, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: hourly}}}}
	}
	st := &pendStore{memStore: memStore{seen: map[string]bool{}},
		cards: []domain.StoredCard{card("rc-cny-1", "CNY", from, 1, "2.80"), card("rc-cny-2", "CNY", bad, 2, "two"), card("rc-usd", "USD", from, 3, "0.40")}}
	a := New(st, nil, clock.NewManual(from.Add(60*24*time.Hour)))
	ev := func(id, cur string, start time.Time) domain.UsageEvent {
		return domain.UsageEvent{ID: id, LeaseID: "l-" + id, ProviderID: "p-1", RenterID: "r-1", GPUModel: "RTX_4090", GPUCount: 1,
			Start: start, End: start.Add(time.Hour), Currency: cur, CycleID: "c-1"}
	}
	msg := UsageMessage{ID: "m-1", Events: []domain.UsageEvent{
		ev("cny-before", "CNY", from.Add(time.Hour)), ev("cny-after", "CNY", bad.Add(time.Hour)), ev("usd", "USD", bad.Add(time.Hour))}}
	if err := a.RateMessages(context.Background(), []UsageMessage{msg}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range st.rated {
		for _, id := range c.EventIDs {
			got[id] = c.Currency.Code + " " + c.Amount.String()
		}
	}
	if want := map[string]string{"cny-before": "CNY 2.8", "usd": "USD 0.4"}; !maps.Equal(got, want) {
		t.Errorf("charged %v, want %v", got, want)
	}
	if len(st.pending) != 1 || st.pending[0].Event.ID != "cny-after" || !strings.Contains(st.pending[0].Reason, "rc-cny-2") {
		t.Errorf("pending %+v, want cny-after waiting for rc-cny-2", st.pending)
	}
	if n, err := a.RetryPending(context.Background()); err != nil || n != 0 {
		t.Errorf("retry rated %d (%v), want none while rc-cny-2 cannot be read", n, err)
	}
	if got := testutil.ToFloat64(cardsSetAside); got != 1 {
		t.Errorf("gpubill_pricing_rate_cards_unreadable %v, want 1", got)
	}
	// Replaced as the alert says (a card of its currency and
	// effective_from), it prices nothing more: the waiting usage is rated
	// and the gauge is back at 0 (it counted the card for good, the alert
	// never clearing).
	st.cards = append(st.cards, card("rc-cny-3", "CNY", bad, 4, "3.00"))
	if n, err := a.RetryPending(context.Background()); err != nil || n != 1 {
		t.Errorf("retry rated %d (%v), want cny-after by rc-cny-3", n, err)
	}
	if got := testutil.ToFloat64(cardsSetAside); got != 0 {
		t.Errorf("gpubill_pricing_rate_cards_unreadable %v once replaced, want 0", got)
	}
}

// reloadingStore is a memStore whose book is new at every look: each
// CardsSeq answers a higher number, as if a card were added each time.
type reloadingStore struct {
	*memStore
	n int64
}

func (s *reloadingStore) CardsSeq(context.Context) (int64, error) { s.n++; return s.n, nil }
func (s *reloadingStore) AllCards(context.Context) ([]domain.StoredCard, int64, error) {
	return []domain.StoredCard{s.card}, s.n, nil
}

// A stored card is held to today's checks for new cards (its overlapping
// bands, here) once per process, not at every reload of the book: with
// bands in several zones that check takes milliseconds a card, and the
// book reloads under the app's lock after every card added.
func TestStoredCardCheckedOncePerProcess(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := flatCardStore(from)
	st.card.Body.Bands = []domain.BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"},
		{Name: "peak", Start: "06:00", End: "09:00", TimeZone: "Asia/Shanghai", Multiplier: "1.50"}}
	a := New(&reloadingStore{memStore: st}, seededCatalogue{}, clock.NewManual(from))
	var logs bytes.Buffer
	a.Log = slog.New(slog.NewTextHandler(&logs, nil))
	for range 3 {
		if _, err := a.Book(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "a new card like it would be refused"); n != 1 {
		t.Fatalf("%d warnings over three reloads of the book, want 1:\n%s", n, logs.String())
	}
}
