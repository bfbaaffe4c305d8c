package domain

import (
	"testing"
	"time"
)

// A card body is the same only when every field is: a replay returns the
// stored card, anything else is a conflict.
func TestCardInputSameBody(t *testing.T) {
	base := func() CardInput {
		return CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "2.00"}},
			Bands:  []BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"}},
			Tiers:  []TierInput{{UpToGPUHours: "100", Discount: "0"}, {Discount: "0.10"}},
			PUE:    &PUEInput{Threshold: "1.5", PerGPUHour: "0.05"}}
	}
	tests := []struct {
		give   string
		change func(*CardInput)
		want   bool
	}{
		{"identical", func(*CardInput) {}, true},
		{"another id", func(c *CardInput) { c.ID = "rc-2" }, true},
		{"same instant in another zone", func(c *CardInput) { c.EffectiveFrom = c.EffectiveFrom.In(time.FixedZone("CST", 8*3600)) }, true},
		{"currency", func(c *CardInput) { c.Currency = "USD" }, false},
		{"effective_from", func(c *CardInput) { c.EffectiveFrom = c.EffectiveFrom.Add(time.Second) }, false},
		{"effective_from a microsecond later", func(c *CardInput) { c.EffectiveFrom = c.EffectiveFrom.Add(time.Microsecond) }, false},
		{"effective_from nanoseconds later (microseconds kept)", func(c *CardInput) { c.EffectiveFrom = c.EffectiveFrom.Add(999) }, true},
		{"price", func(c *CardInput) { c.Prices[0].Hourly = "3.00" }, false},
		{"one more price", func(c *CardInput) { c.Prices = append(c.Prices, PriceInput{Model: "H100", Hourly: "9"}) }, false},
		{"band", func(c *CardInput) { c.Bands[0].TimeZone = "UTC" }, false},
		{"no bands", func(c *CardInput) { c.Bands = nil }, false},
		{"tier", func(c *CardInput) { c.Tiers[1].Discount = "0.20" }, false},
		{"pue", func(c *CardInput) { c.PUE.PerGPUHour = "0.06" }, false},
		{"no pue", func(c *CardInput) { c.PUE = nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			stored, in := base(), base()
			tt.change(&in)
			if got := stored.SameBody(in); got != tt.want {
				t.Fatalf("SameBody = %v, want %v", got, tt.want)
			}
		})
	}
}
