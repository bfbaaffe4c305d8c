package app

import (
	"context"
	"errors"
	"slices"
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

// A quote naming its provider and no tax profile or jurisdiction leaves
// them to the tax service, which splits by the provider's on record, as
// its settlement does: pricing filled in individual, and an enterprise in
// CN was quoted 150.00 of tax on 1000.00 its statement withheld 0.00 from.
// A profile given is passed on as given, one of neither kind is a 400.
func TestQuoteLeavesTheProvidersProfileToTheTaxService(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	var asked SplitRequest
	a.Splits = askedSplit{got: &asked}
	tests := []struct {
		giveProvider, giveProfile, giveJurisdiction string
		wantProfile, wantJurisdiction               string
	}{
		{"p-ent", "", "", "", ""},
		{"p-ent", "enterprise", "", "enterprise", ""},
		{"p-hk", "", "hk", "", "hk"},
		{"", "", "", "", ""}, // the tax service's default: individual in CN
	}
	for _, tt := range tests {
		in := QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1", StartTime: &start,
			ProviderID: tt.giveProvider, TaxProfile: tt.giveProfile, Jurisdiction: tt.giveJurisdiction}
		if _, err := a.Quote(context.Background(), in); err != nil || asked.TaxProfile != tt.wantProfile || asked.Jurisdiction != tt.wantJurisdiction {
			t.Errorf("quote of %q as %q in %q: %v; the split was asked for %q in %q, want %q in %q", tt.giveProvider, tt.giveProfile,
				tt.giveJurisdiction, err, asked.TaxProfile, asked.Jurisdiction, tt.wantProfile, tt.wantJurisdiction)
		}
	}
	in := QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1", StartTime: &start, ProviderID: "p-ent", TaxProfile: "corp"}
	if _, err := a.Quote(context.Background(), in); !errors.As(err, new(*apperr.InvalidError)) || !strings.Contains(err.Error(), "tax_profile") {
		t.Errorf("tax profile corp: %v, want invalid naming tax_profile", err)
	}
}

// twoCardStore is a flatCardStore with a later card in force from its
// effective_from.
type twoCardStore struct {
	*memStore
	later domain.StoredCard
}

func (s twoCardStore) CardsSeq(context.Context) (int64, error) { return s.later.Seq, nil }
func (s twoCardStore) AllCards(context.Context) ([]domain.StoredCard, int64, error) {
	return []domain.StoredCard{s.card, s.later}, s.later.Seq, nil
}

// A quote spanning a later card's effective_from is priced in parts, each
// by the card in force there, each line naming its card: what rating
// charges the same usage recorded as events that do not cross the change
// (each event priced by the card at its start). 48 GPU-hours from 10:00
// UTC on 1 January, rc-1 at 2.80 an hour, rc-2 at 5.60 from 2 January: 14
// hours at 2.80 and 34 at 5.60, 39.20 + 190.40 = 229.60. It was priced
// wholly by rc-1: 134.40.
func TestQuoteSpansACardChange(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	change := from.Add(24 * time.Hour)
	st := flatCardStore(from)
	later := domain.StoredCard{ID: "rc-2", Currency: "CNY", EffectiveFrom: change, Seq: 2,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: change, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "5.60"}}}}
	a := New(twoCardStore{st, later}, seededCatalogue{}, clock.NewManual(from.Add(72*time.Hour)))
	a.Splits = halfSplit{}
	start := from.Add(10 * time.Hour)
	q, err := a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "48", StartTime: &start})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range q.Lines {
		lines = append(lines, l.RateCardID+" "+l.GPUHours+" GPU-h at "+l.UnitPrice+" = "+l.Amount)
	}
	wantLines := []string{"rc-1 14 GPU-h at 2.8 = 39.2", "rc-2 34 GPU-h at 5.6 = 190.4"}
	if q.RenterPrice != "229.60" || q.RateCardID != "rc-1" || !slices.Equal(lines, wantLines) {
		t.Fatalf("quote %s on %s, lines %q; want 229.60 on rc-1, lines %q", q.RenterPrice, q.RateCardID, lines, wantLines)
	}
	parts := decimal.Zero
	for _, s := range []string{q.Commission, q.TaxWithheld, q.ProviderNet} {
		parts = parts.Add(decimal.RequireFromString(s))
	}
	if want := decimal.RequireFromString("229.60"); !parts.Equal(want) || q.Commission != "114.80" {
		t.Errorf("commission %s + tax %s + net %s = %s, want 229.60 (half, 114.80, to commission)", q.Commission, q.TaxWithheld, q.ProviderNet, parts)
	}
	// Rating charges the same: the usage as three events that do not cross
	// the change, each priced by the card at its start.
	ev := func(id string, from, to time.Time) domain.UsageEvent {
		return domain.UsageEvent{ID: id, LeaseID: "lease-q", ProviderID: "p-000", RenterID: "r-000", GPUModel: "RTX_4090", GPUCount: 1,
			Start: from, End: to, Currency: "CNY", CycleID: "c-1"}
	}
	msg := UsageMessage{ID: "ub-q", Events: []domain.UsageEvent{ev("e1", start, change), ev("e2", change, change.Add(24*time.Hour)),
		ev("e3", change.Add(24*time.Hour), start.Add(48*time.Hour))}}
	if err := a.RateMessages(context.Background(), []UsageMessage{msg}); err != nil {
		t.Fatal(err)
	}
	charged := decimal.Zero
	for _, c := range st.rated {
		charged = charged.Add(c.Amount)
	}
	if len(st.held) != 0 || !charged.Equal(decimal.RequireFromString("229.60")) {
		t.Errorf("rating charged %s (%d events pending), want 229.60, what the quote answers", charged, len(st.held))
	}
}

// recordedTiers is a provider-tier read model in memory; err fails reads.
type recordedTiers struct {
	tiers map[string]string
	err   error
}

func (r recordedTiers) Tier(_ context.Context, provider string) (string, bool, error) {
	t, ok := r.tiers[provider]
	return t, ok, r.err
}

// A quote naming a provider splits at the commission rate of the
// provider's tier on record, as its settlement does: it took the request's
// tier, else standard, and quoted a partner 25 % (default rates: standard
// 25 %, pro 20 %, partner 15 %) where its statement took 15 %. The tier
// on record given is the same quote; another is a 400 naming
// provider_tier; a provider without a record is split at standard.
func TestQuoteTakesTheProvidersTier(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	var asked SplitRequest
	a.Splits = askedSplit{got: &asked}
	a.Tiers = recordedTiers{tiers: map[string]string{"p-part": "partner", "p-pro": "pro", "p-odd": "gold"}}
	quote := func(provider, tier string) (QuoteResult, error) {
		return a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1",
			StartTime: &start, ProviderID: provider, ProviderTier: tier})
	}
	tests := []struct {
		giveProvider, giveTier string
		wantRate               string
	}{
		{"p-part", "", "0.15"},
		{"p-part", "partner", "0.15"},
		{"p-pro", "", "0.2"},
		{"p-new", "", "0.25"}, // no record: standard, as its settlement (TestQuoteNamesTheTierAndTaxpayerItUsed)
		{"", "pro", "0.2"},
	}
	for _, tt := range tests {
		got, err := quote(tt.giveProvider, tt.giveTier)
		if err != nil || got.CommissionRate != tt.wantRate || asked.CommissionRate.String() != tt.wantRate {
			t.Errorf("%q quoted with tier %q: rate %s (split asked at %s), %v; want %s", tt.giveProvider, tt.giveTier,
				got.CommissionRate, asked.CommissionRate, err, tt.wantRate)
		}
	}
	for _, give := range []string{"standard", "pro"} {
		_, err := quote("p-part", give)
		if !errors.As(err, new(*apperr.InvalidError)) || !strings.Contains(err.Error(), "provider_tier") || !strings.Contains(err.Error(), "p-part") {
			t.Errorf("p-part (partner) quoted as %s: %v; want invalid naming provider_tier and the provider", give, err)
		}
	}
	// A tier the commission configuration lacks is the record's to
	// correct, not a 400 on a field the quote left out.
	if _, err := quote("p-odd", ""); !errors.Is(err, apperr.ErrPrecondition) || !strings.Contains(err.Error(), "p-odd") {
		t.Errorf("a provider recorded as gold: %v; want a failed precondition naming it", err)
	}
	// The read model failing fails the quote: never quoted at the
	// request's tier instead.
	down := errors.New("read model down")
	a.Tiers = recordedTiers{err: down}
	if _, err := quote("p-part", ""); !errors.Is(err, down) {
		t.Errorf("the tier read failing: %v; want its error", err)
	}
}
