package domain

import (
	"sort"

	"github.com/shopspring/decimal"
)

// PricedLine is one stored line of a rated charge as explanations read it
// (amounts exact).
type PricedLine struct {
	Kind, GPUModel, Band, Tier, RateCardID string
	GPUHours, Amount                       decimal.Decimal // exact
}

// StoredCharge is a rated charge as explanations read it: its rounded amount
// (what the ledger posts) and its lines.
type StoredCharge struct {
	ID       string
	Currency string
	Amount   decimal.Decimal
	Lines    []PricedLine
}

// LineKey groups charge lines on an invoice: kind, GPU model, band, tier.
type LineKey struct{ Kind, GPUModel, Band, Tier string }

// LineSum is the lines of one key summed, with the volume-tier discount
// they received (list price minus amount).
type LineSum struct {
	LineKey
	GPUHours, Amount, TierDiscount decimal.Decimal
}

// Card returns the card with the id.
func (b *Book) Card(id string) (*Card, bool) {
	for _, cs := range b.byCur {
		for _, c := range cs {
			if c.ID == id {
				return c, true
			}
		}
	}
	return nil, false
}

// TierDiscountOf is the discount a line's tier took off its list price:
// amount × d / (1 − d) for the tier's discount d (in [0, 1), ParseCard), 0
// for a line without a tier. ok is false when the line names a tier its
// card does not have (the card is gone or the label changed), so a caller
// never shows a discount it cannot derive.
func TierDiscountOf(l PricedLine, card *Card) (decimal.Decimal, bool) {
	if l.Tier == "" {
		return decimal.Zero, true
	}
	if card == nil {
		return decimal.Zero, false
	}
	for _, t := range card.Tiers {
		if t.Label == l.Tier {
			return l.Amount.Mul(t.Discount).DivRound(one.Sub(t.Discount), ExactScale), true
		}
	}
	return decimal.Zero, false
}

// SumLines sums lines per key, in key order. card finds a line's rate card
// (for its tier discount); a tier it cannot derive is an error the caller
// names, never a silent zero.
func SumLines(lines []PricedLine, card func(id string) (*Card, bool)) ([]LineSum, []string) {
	sums := map[LineKey]*LineSum{}
	var unknown []string
	for _, l := range lines {
		k := LineKey{Kind: l.Kind, GPUModel: l.GPUModel, Band: l.Band, Tier: l.Tier}
		s := sums[k]
		if s == nil {
			s = &LineSum{LineKey: k}
			sums[k] = s
		}
		s.GPUHours = s.GPUHours.Add(l.GPUHours)
		s.Amount = s.Amount.Add(l.Amount)
		c, _ := card(l.RateCardID)
		d, ok := TierDiscountOf(l, c)
		if !ok {
			unknown = append(unknown, l.RateCardID+"/"+l.Tier)
			continue
		}
		s.TierDiscount = s.TierDiscount.Add(d)
	}
	out := make([]LineSum, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return lessKey(out[i].LineKey, out[j].LineKey) })
	return out, unknown
}

func lessKey(a, b LineKey) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.GPUModel != b.GPUModel {
		return a.GPUModel < b.GPUModel
	}
	if a.Band != b.Band {
		return a.Band < b.Band
	}
	return a.Tier < b.Tier
}
