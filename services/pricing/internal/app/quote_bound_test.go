package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// taxSplit refuses a gross as the tax service does (QuoteWithholding:
// cur.Parse, at most money.AmountIntegerDigitsMax digits before the point),
// and counts what it is asked.
type taxSplit struct{ asked *int }

func (s taxSplit) QuoteSplit(ctx context.Context, r SplitRequest) (SplitQuote, error) {
	*s.asked++
	cur := money.MustLookup(r.Currency)
	if _, err := cur.Parse(cur.Format(r.Gross)); err != nil {
		return SplitQuote{}, apperr.Invalid("gross", "want a non-negative amount in %s minor units", cur.Code)
	}
	return halfSplit{}.QuoteSplit(ctx, r)
}

// A quote priced by a rate card stored before today's price bounds (an
// hourly "1e20") is refused as the usage it quotes would wait: a
// precondition naming the card, the tax service never asked. The gross,
// 10^20 yuan, went to tax, and the client got tax's 400 on a gross field
// it never sent. Each day of a quote counts as an event (metering records
// usage in events of at most a day): a card within today's bounds quotes a
// month at its highest band above domain.EventAmountMax, as its usage is
// charged.
func TestQuoteOfACardAboveTheBoundsNamesTheCard(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	quote := func(body domain.CardInput, gpus int32, hours string) (QuoteResult, int, error) {
		body.Currency, body.EffectiveFrom = "CNY", from
		st := &memStore{seen: map[string]bool{}, card: domain.StoredCard{ID: "rc-old", Currency: "CNY", EffectiveFrom: from, Seq: 1, Body: body}}
		a := New(st, seededCatalogue{}, clock.NewManual(from.Add(48*time.Hour)))
		var asked int
		a.Splits = taxSplit{asked: &asked}
		start := from.Add(10 * time.Hour)
		q, err := a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: gpus, Hours: hours, StartTime: &start})
		return q, asked, err
	}
	for _, tt := range []struct {
		name   string
		hourly string
		gpus   int32
		hours  string
	}{
		{"an hour at 10^20", "1e20", 1, "1"},
		{"an hour above EventAmountMax, a gross tax takes", "1e15", 1, "1"},
		{"a day of 64 GPUs above EventAmountMax", "1e13", 64, "24"},
	} {
		_, asked, err := quote(domain.CardInput{Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: tt.hourly}}}, tt.gpus, tt.hours)
		if !errors.Is(err, apperr.ErrPrecondition) || !strings.Contains(err.Error(), "rate card rc-old") || strings.Contains(err.Error(), "gross") {
			t.Errorf("%s: %v; want a failed precondition naming rate card rc-old, not gross", tt.name, err)
		}
		if asked != 0 {
			t.Errorf("%s: the tax split was asked %d times, want none", tt.name, asked)
		}
	}
	// Within today's bounds: domain.PriceMax, ×domain.MultiplierMax all but
	// a minute of the day, 64 GPUs for 744 hours (about 4.8 × 10^15).
	within := domain.CardInput{Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: domain.PriceMax.String()}},
		Bands: []domain.BandInput{{Name: "peak", Start: "00:00", End: "23:59", TimeZone: "UTC", Multiplier: domain.MultiplierMax.String()}}}
	q, asked, err := quote(within, 64, "744")
	if err != nil || asked != 1 {
		t.Fatalf("a month of a card within today's bounds: %+v, %v, split asked %d times; want it quoted", q, err, asked)
	}
	if gross, err := money.ParseDecimal(q.RenterPrice); err != nil || !gross.GreaterThan(domain.EventAmountMax) {
		t.Fatalf("renter price %s, %v; want above EventAmountMax %s (the quote proves nothing otherwise)", q.RenterPrice, err, domain.EventAmountMax)
	}
}
