package domain

import (
	"testing"
	"time"
)

// A new card's prices and multipliers are bounded, each refused naming its
// field: hourly "1e62" was taken (only non-negative was checked), and its
// charges, 66 characters with 2 decimals, were refused by the ledger (the
// whole ChargesRated message dead-lettered) after pricing counted them
// billed. A stored card is read as stored: refusing it would set it aside
// and stop pricing usage that its prices bill within bounds.
func TestCardPriceBounds(t *testing.T) {
	base := func() CardInput {
		return CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "2.00"}},
			Bands:  []BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"}},
			PUE:    &PUEInput{Threshold: "1.5", PerGPUHour: "0.05"}}
	}
	tests := []struct {
		give   string
		change func(*CardInput)
		want   string // the field refused, "" = accepted
	}{
		{"hourly at the bound", func(c *CardInput) { c.Prices[0].Hourly = "1000000000" }, ""},
		{"hourly past the bound", func(c *CardInput) { c.Prices[0].Hourly = "1000000000.01" }, "gpu_prices[0].hourly"},
		{"hourly 1e62", func(c *CardInput) { c.Prices[0].Hourly = "1e62" }, "gpu_prices[0].hourly"},
		{"multiplier at the bound", func(c *CardInput) { c.Bands[0].Multiplier = "100" }, ""},
		{"multiplier past the bound", func(c *CardInput) { c.Bands[0].Multiplier = "100.01" }, "time_bands[0].multiplier"},
		{"multiplier 1e40", func(c *CardInput) { c.Bands[0].Multiplier = "1e40" }, "time_bands[0].multiplier"},
		{"per_gpu_hour at the bound", func(c *CardInput) { c.PUE.PerGPUHour = "1000000000" }, ""},
		{"per_gpu_hour past the bound", func(c *CardInput) { c.PUE.PerGPUHour = "1000000000.01" }, "pue_surcharge.per_gpu_hour"},
		{"per_gpu_hour 1e62", func(c *CardInput) { c.PUE.PerGPUHour = "1e62" }, "pue_surcharge.per_gpu_hour"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			in := base()
			tt.change(&in)
			_, vs := ParseCard(in)
			var got string
			if len(vs) > 0 {
				got = vs[0].Field
			}
			if got != tt.want || len(vs) > 1 {
				t.Errorf("violations %v, want one naming %q", vs, tt.want)
			}
			if _, vs := LoadCard(in); len(vs) > 0 {
				t.Errorf("stored, the card is refused: %v", vs)
			}
		})
	}
}
