package domain

import (
	"testing"

	"github.com/shopspring/decimal"
)

// Lines sum per kind, model, band and tier; a tier's discount is what it
// took off the list price (amount / (1 - d) - amount), a line without a
// tier has none, and a tier its card does not define is reported, never
// taken as no discount.
func TestSumLines(t *testing.T) {
	card := mustCard(t, CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: ts("2026-01-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "H100", Hourly: "10"}},
		Tiers:  []TierInput{{UpToGPUHours: "100", Discount: "0"}, {UpToGPUHours: "", Discount: "0.20"}}})
	book := NewBook([]*Card{card})
	d := decimal.RequireFromString
	top := card.Tiers[1].Label
	lines := []PricedLine{
		{Kind: "usage", GPUModel: "H100", Band: "night", Tier: top, RateCardID: "rc-1", GPUHours: d("2"), Amount: d("16")},
		{Kind: "usage", GPUModel: "H100", Band: "", RateCardID: "rc-1", GPUHours: d("1"), Amount: d("10")},
		{Kind: "usage", GPUModel: "H100", Band: "night", Tier: top, RateCardID: "rc-1", GPUHours: d("0.5"), Amount: d("4")},
	}
	sums, unknown := SumLines(lines, book.Card)
	if len(unknown) != 0 || len(sums) != 2 {
		t.Fatalf("sums %+v unknown %v", sums, unknown)
	}
	// Sorted by key: the default band ("") before night.
	if s := sums[0]; s.Band != "" || !s.Amount.Equal(d("10")) || !s.TierDiscount.IsZero() {
		t.Fatalf("default band line %+v", s)
	}
	// 20 at list price 25 (20 / 0.8): 5 off.
	if s := sums[1]; s.Tier != top || !s.GPUHours.Equal(d("2.5")) || !s.Amount.Equal(d("20")) || !s.TierDiscount.Equal(d("5")) {
		t.Fatalf("night tier line %+v", s)
	}
	_, unknown = SumLines([]PricedLine{{Kind: "usage", Tier: "9+ GPU-h", RateCardID: "rc-1", Amount: d("1")},
		{Kind: "usage", Tier: top, RateCardID: "rc-gone", Amount: d("1")}}, book.Card)
	if len(unknown) != 2 {
		t.Fatalf("unknown tiers %v, want both reported", unknown)
	}
}
