package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// seededCatalogue is the GPU catalogue's seed.
type seededCatalogue struct{}

func (seededCatalogue) Index(context.Context) (gpucatalog.Index, error) {
	return gpucatalog.NewIndex(gpucatalog.Seed())
}

// halfSplit splits half to commission, the rest to net.
type halfSplit struct{}

func (halfSplit) QuoteSplit(_ context.Context, r SplitRequest) (SplitQuote, error) {
	c := r.Gross.Div(decimal.NewFromInt(2)).Round(2)
	return SplitQuote{Commission: c, Net: r.Gross.Sub(c), RuleSet: "test", RuleVersion: "1"}, nil
}

// quoteApp is pricing with one CNY card from 2026-01-01 pricing RTX_4090 at
// 2.80 an hour, half of each quote to commission; start is a time it prices.
func quoteApp() (*App, time.Time) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &memStore{seen: map[string]bool{}, card: domain.StoredCard{ID: "rc-1", Currency: "CNY", EffectiveFrom: from, Seq: 1,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}}}
	a := New(st, seededCatalogue{}, clock.NewManual(from.Add(48*time.Hour)))
	a.Splits = halfSplit{}
	return a, from.Add(10 * time.Hour)
}

// A quote names a GPU model as usage may: an alias or another case of it
// is priced as its catalogue id, as metering records the usage. It was a
// 400 ("no price") while the usage it quoted was charged.
func TestQuoteResolvesModelNames(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	quote := func(model string) (QuoteResult, error) {
		return a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: model, GPUCount: 2, Hours: "1.5", StartTime: &start,
			ProviderTier: "standard", TaxProfile: "individual"})
	}
	want, err := quote("RTX_4090")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rtx_4090", "RTX 4090", "rtx4090"} {
		got, err := quote(name)
		if err != nil || got.RenterPrice != want.RenterPrice || got.RateCardID != want.RateCardID {
			t.Errorf("quote for %q: %+v, %v; want %s on %s", name, got, err, want.RenterPrice, want.RateCardID)
		}
	}
	if _, err := quote("GTX_9999"); err == nil {
		t.Error("a quote for a model the catalogue lacks was answered")
	}
}

// A quote for less than half a microsecond of GPU time (usage is timed to
// the microsecond) is a 400 naming hours; it was an empty usage interval,
// a 500. A microsecond is quoted.
func TestQuoteUnderAMicrosecond(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	quote := func(hours string) error {
		_, err := a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: hours, StartTime: &start})
		return err
	}
	for _, hours := range []string{"0.0000000001", "0.0000000001388"} { // 0.36 µs, 0.49968 µs
		var inv *apperr.InvalidError
		if err := quote(hours); !errors.As(err, &inv) || !strings.Contains(err.Error(), "hours") {
			t.Errorf("hours %s: %v; want invalid naming hours", hours, err)
		}
	}
	if err := quote("0.0000000002778"); err != nil { // 1.00008 µs
		t.Errorf("a microsecond's quote: %v", err)
	}
}

// askedSplit records the split request it answers.
type askedSplit struct{ got *SplitRequest }

func (s askedSplit) QuoteSplit(ctx context.Context, r SplitRequest) (SplitQuote, error) {
	*s.got = r
	return halfSplit{}.QuoteSplit(ctx, r)
}

// A quote naming its provider asks the tax split for that provider (its own
// rule set selection applies, as at its settlement); one outside the id
// grammar is a 400 naming provider_id.
func TestQuoteNamesItsProviderToTheSplit(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	var asked SplitRequest
	a.Splits = askedSplit{got: &asked}
	in := QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1", StartTime: &start, ProviderID: "p-sel"}
	if _, err := a.Quote(context.Background(), in); err != nil || asked.ProviderID != "p-sel" {
		t.Fatalf("quote: %v; the split was asked for provider %q, want p-sel", err, asked.ProviderID)
	}
	in.ProviderID = "p sel"
	if _, err := a.Quote(context.Background(), in); !errors.As(err, new(*apperr.InvalidError)) {
		t.Fatalf("provider id outside the grammar: %v, want invalid", err)
	}
}
