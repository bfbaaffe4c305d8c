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

// WithinEventMax holds an event to EventAmountMax at its price under the
// card's largest band multiplier, with its PUE surcharge, whether one
// comparison of integers decides it or decimals do: expected amounts are
// GPUs × hours × (hourly × multiplier + surcharge), worked out by hand.
func TestWithinEventMax(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stored := func(prices []PriceInput, bands []BandInput, pue *PUEInput) *Card {
		c, vs := LoadCard(CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: from, Prices: prices, Bands: bands, PUE: pue})
		if len(vs) > 0 {
			t.Fatal(vs)
		}
		return c
	}
	night := []BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "150"}}
	cards := map[string]*Card{
		// Today's bounds at their most: 1536 GPU-hours × (10^9 × 100 + 10^9) = 1.55136 × 10^14.
		"new at the bounds": stored([]PriceInput{{Model: "H100", Hourly: "1000000000"}},
			[]BandInput{{Name: "peak", Start: "09:00", End: "17:00", TimeZone: "UTC", Multiplier: "100"}},
			&PUEInput{Threshold: "1.5", PerGPUHour: "1000000000"}),
		// 1 GPU-hour is 4 × 10^14 exactly.
		"at the event bound": stored([]PriceInput{{Model: "H100", Hourly: "400000000000000"}}, nil, nil),
		// 2 × 10^10 × 150 + 10^11 = 3.1 × 10^12 a GPU-hour: 129.03 GPU-hours at most.
		"stored above": stored([]PriceInput{{Model: "H100", Hourly: "20000000000"}, {Model: "A10", Hourly: "1"}}, night,
			&PUEInput{Threshold: "1.5", PerGPUHour: "100000000000"}),
		"stored 1e62": stored([]PriceInput{{Model: "H100", Hourly: "1e62"}, {Model: "A10", Hourly: "1"}}, nil, nil),
	}
	tests := []struct {
		card, model string
		gpus        int32
		d           time.Duration
		want        bool
	}{
		{"new at the bounds", "H100", 64, 24 * time.Hour, true},
		{"at the event bound", "H100", 1, time.Hour, true},
		{"at the event bound", "H100", 1, time.Hour + time.Microsecond, false},
		{"at the event bound", "H100", 2, time.Hour / 2, true},
		{"stored above", "H100", 1, 129 * time.Hour, true},
		{"stored above", "H100", 43, 3*time.Hour + 2*time.Second, true},  // 129.024 GPU-hours
		{"stored above", "H100", 43, 3*time.Hour + 3*time.Second, false}, // 129.036
		{"stored above", "A10", 64, 24 * time.Hour, true},                // 1536 × (150 + 10^11): its own price, not H100's
		{"stored 1e62", "H100", 1, time.Microsecond, false},
		{"stored 1e62", "A10", 64, 24 * time.Hour, true},
		{"stored 1e62", "H100", 0, time.Hour, true},  // empty: Rate refuses it
		{"stored 1e62", "H100", 1, -time.Hour, true}, // empty: Rate refuses it
	}
	for _, tt := range tests {
		if got := cards[tt.card].WithinEventMax(tt.model, "", tt.gpus, tt.d); got != tt.want {
			t.Errorf("%s: %d × %s for %s: within %v, want %v", tt.card, tt.gpus, tt.model, tt.d, got, tt.want)
		}
	}
}
