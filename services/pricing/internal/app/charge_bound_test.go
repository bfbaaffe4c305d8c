package app

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// The largest charge a new card can rate is an amount the ledger parses
// (money.Currency.Parse, at most money.AmountIntegerDigitsMax digits before
// the point) in every currency, its exact amount too: chargeEventsMax
// events, each at metering's bounds (64 GPUs, 24 hours), all in a band at
// domain.MultiplierMax over domain.PriceMax, with the PUE surcharge at
// domain.PriceMax. Raising a bound past what this holds would have the
// ledger dead-letter the charge pricing counted billed.
func TestLargestChargeIsAnAmount(t *testing.T) {
	const gpuCountMax, eventDurationMax = 64, 24 * time.Hour // metering's GPUCountMax, EventDurationMax
	micros := int64(chargeEventsMax) * gpuCountMax * eventDurationMax.Microseconds()
	ps := domain.PriceSeconds(micros, domain.PriceMax, domain.MultiplierMax).Add(domain.PriceSeconds(micros, domain.PriceMax, decimal.NewFromInt(1)))
	for _, code := range money.Codes() {
		cur := money.MustLookup(code)
		for _, s := range []string{cur.Format(domain.RoundPS(cur, ps)), money.DecimalString(domain.Amount(ps))} {
			if _, err := money.ParseDecimal(s); err != nil {
				t.Errorf("%s: %q: %v", code, s, err)
			}
		}
		if _, err := cur.Parse(cur.Format(domain.RoundPS(cur, ps))); err != nil {
			t.Errorf("%s: the largest charge: %v", code, err)
		}
	}
	// A card stored before the bounds prices an event at most
	// domain.EventAmountMax: the largest event above is within it, and a
	// charge of chargeEventsMax events at it, a unit of cumulative rounding
	// added, is an amount.
	if event := domain.Amount(ps).Div(decimal.NewFromInt(chargeEventsMax)); event.GreaterThan(domain.EventAmountMax) {
		t.Errorf("the largest event a new card prices, %s, is above EventAmountMax %s", event, domain.EventAmountMax)
	}
	for _, code := range money.Codes() {
		cur := money.MustLookup(code)
		most := domain.EventAmountMax.Mul(decimal.NewFromInt(chargeEventsMax)).Add(cur.Unit())
		if _, err := cur.Parse(cur.Format(most)); err != nil {
			t.Errorf("%s: a charge of %d events at EventAmountMax: %v", code, chargeEventsMax, err)
		}
	}
}

// A charge is never rated above what the ledger takes: an hourly "1e20"
// on a card stored before today's bounds rated a charge of 10^20 yuan,
// published, and the ledger's Parse refused it, dead-lettering the whole
// ChargesRated message (every charge of its provider's batch) after
// pricing counted them billed. An event a stored card may charge more than
// domain.EventAmountMax waits as pending, alone, naming the card, until a
// card replaces it; the card's other prices, above today's bounds too, rate
// what they charge within it.
func TestChargeTheLedgerRefusesIsNeverRated(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	card := func(id string, seq int64, prices ...domain.PriceInput) domain.StoredCard {
		return domain.StoredCard{ID: id, Currency: "CNY", EffectiveFrom: from, Seq: seq,
			Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: prices}}
	}
	st := &pendStore{memStore: memStore{seen: map[string]bool{}}, cards: []domain.StoredCard{card("rc-1", 1,
		domain.PriceInput{Model: "RTX_4090", Hourly: "1e20"}, domain.PriceInput{Model: "A100", Hourly: "1000000000000"},
		domain.PriceInput{Model: "H100", Hourly: "2000000000"})}}
	a := New(st, nil, clock.NewManual(from.Add(60*24*time.Hour)))
	ev := func(id, model string, gpus int32, d time.Duration) domain.UsageEvent {
		start := from.Add(24 * time.Hour)
		return domain.UsageEvent{ID: id, LeaseID: "l-" + id, ProviderID: "p-1", RenterID: "r-1", GPUModel: model, GPUCount: gpus,
			Start: start, End: start.Add(d), Currency: "CNY", CycleID: "c-1"}
	}
	msg := UsageMessage{ID: "m-1", Events: []domain.UsageEvent{ev("huge", "RTX_4090", 1, time.Hour),
		ev("a100-small", "A100", 1, time.Hour), ev("a100-big", "A100", 64, 24*time.Hour), ev("h100", "H100", 64, 24*time.Hour)}}
	ctx := context.Background()
	if err := a.RateMessages(ctx, []UsageMessage{msg}); err != nil {
		t.Fatal(err)
	}
	charged := func() map[string]string {
		got := map[string]string{}
		for _, c := range st.rated {
			// What the ledger reads of it (ports.ratedCharge formats it so).
			if _, err := c.Currency.Parse(c.Currency.Format(c.Amount)); err != nil {
				t.Errorf("charge %s of %v rated, which the ledger refuses: %v", c.ID, c.EventIDs, err)
			}
			for _, id := range c.EventIDs {
				got[id] = c.Amount.String()
			}
		}
		return got
	}
	// 1 GPU-hour at 10^12; 1536 GPU-hours at 2 × 10^9.
	if got, want := charged(), map[string]string{"a100-small": "1000000000000", "h100": "3072000000000"}; !maps.Equal(got, want) {
		t.Errorf("charged %v, want %v", got, want)
	}
	waiting := map[string]bool{}
	for _, p := range st.pending {
		waiting[p.Event.ID] = true
		if !strings.Contains(p.Reason, "rc-1") {
			t.Errorf("%s waits for %q, want the reason to name rc-1", p.Event.ID, p.Reason)
		}
	}
	if want := map[string]bool{"huge": true, "a100-big": true}; !maps.Equal(waiting, want) {
		t.Errorf("pending %v, want %v", waiting, want)
	}
	if n, err := a.RetryPending(ctx); err != nil || n != 0 {
		t.Errorf("retry rated %d (%v), want none while rc-1 prices them", n, err)
	}
	st.cards = append(st.cards, card("rc-2", 2, domain.PriceInput{Model: "RTX_4090", Hourly: "2.80"},
		domain.PriceInput{Model: "A100", Hourly: "3.00"}, domain.PriceInput{Model: "H100", Hourly: "4.00"}))
	if n, err := a.RetryPending(ctx); err != nil || n != 2 {
		t.Errorf("retry rated %d (%v), want both by rc-2", n, err)
	}
	if got, want := charged(), map[string]string{"a100-small": "1000000000000", "h100": "3072000000000", "huge": "2.8", "a100-big": "4608"}; !maps.Equal(got, want) {
		t.Errorf("charged %v once rc-2 replaced rc-1, want %v", got, want)
	}
}

// leaseStateTx answers a lease's cumulative state as given.
type leaseStateTx struct {
	pendTx
	leases map[domain.LeaseCurrency]domain.LeaseTotal
}

func (t leaseStateTx) LeaseTotals(context.Context, []domain.LeaseCurrency) (map[domain.LeaseCurrency]domain.LeaseTotal, error) {
	return maps.Clone(t.leases), nil
}

// Whatever a lease's state, a charge the ledger would refuse is not rated:
// the rating fails (the consumer dead-letters the message that keeps
// failing alone), nothing is written or published. A lease's state no
// rating writes (billed 0 of an exact 10^18 yuan) stands for any way past
// WithinEventMax and chargeEventsMax.
func TestChargeAboveTheLedgersBoundFailsTheRating(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &pendStore{memStore: *flatCardStore(from)}
	st.cards = []domain.StoredCard{st.card}
	huge := domain.AmountMax.Mul(decimal.NewFromInt(3600))
	a := New(storeWithLeases{st, map[domain.LeaseCurrency]domain.LeaseTotal{{LeaseID: "l-1", Currency: "CNY"}: {ExactPS: huge}}},
		nil, clock.NewManual(from.Add(48*time.Hour)))
	start := from.Add(time.Hour)
	msg := UsageMessage{ID: "m-1", Events: []domain.UsageEvent{{ID: "ev-1", LeaseID: "l-1", ProviderID: "p-1", RenterID: "r-1",
		GPUModel: "RTX_4090", GPUCount: 1, Start: start, End: start.Add(time.Hour), Currency: "CNY", CycleID: "c-1"}}}
	err := a.RateMessages(context.Background(), []UsageMessage{msg})
	if err == nil || !strings.Contains(err.Error(), "more than the ledger takes") || len(st.rated) != 0 {
		t.Fatalf("rating: %v, %d charges written; want it refused, none written", err, len(st.rated))
	}
}

// storeWithLeases is a pendStore whose transactions answer leases' state.
type storeWithLeases struct {
	*pendStore
	leases map[domain.LeaseCurrency]domain.LeaseTotal
}

func (s storeWithLeases) WithTx(_ context.Context, fn func(Tx) error) error {
	return fn(leaseStateTx{pendTx{memTx{&s.memStore}, s.pendStore}, s.leases})
}
