package domain

import (
	"strings"
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

// A new card whose bands share an instant is refused, naming the band and
// the first earlier band it overlaps: usage at that instant was priced by
// whichever was listed first (night 23:00–07:00 at ×0.80, then peak
// 06:00–09:00 at ×1.50: 06:00–07:00 at night; listed the other way round,
// at peak). Bands of one zone overlap by the wall clock; bands of two zones
// where their offsets put them, in summer only for a zone with daylight
// saving. Bands that meet at an edge do not overlap ([start, end)). A card
// stored with overlapping bands still loads and prices as it did: the first
// listed band holds the shared hour.
func TestBandsThatOverlapAreRefused(t *testing.T) {
	t.Parallel()
	band := func(name, start, end, zone string) BandInput {
		return BandInput{Name: name, Start: start, End: end, TimeZone: zone, Multiplier: "1.50"}
	}
	night := BandInput{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"}
	peak := band("peak", "06:00", "09:00", "Asia/Shanghai")
	london := band("london", "00:00", "01:00", "Europe/London") // 23:00–00:00 UTC in summer, 00:00–01:00 in winter
	tests := []struct {
		give      string
		bands     []BandInput
		want      string // the band refused, "" = the card is accepted
		wantWhere string // in its reason
	}{
		{"night then peak", []BandInput{night, peak}, "time_bands[1]", `overlaps time_bands[0] ("night") 06:00–07:00 Asia/Shanghai`},
		{"peak then night", []BandInput{peak, night}, "time_bands[1]", `overlaps time_bands[0] ("peak") 06:00–07:00 Asia/Shanghai`},
		{"one inside another", []BandInput{band("day", "09:00", "18:00", "Asia/Shanghai"), band("lunch", "12:00", "13:00", "Asia/Shanghai")},
			"time_bands[1]", `overlaps time_bands[0] ("day") 12:00–13:00 Asia/Shanghai`},
		{"the first of two it overlaps", []BandInput{band("a", "00:00", "06:00", "Asia/Shanghai"), band("b", "06:00", "12:00", "Asia/Shanghai"),
			band("c", "05:00", "07:00", "Asia/Shanghai")}, "time_bands[2]", `overlaps time_bands[0] ("a") 05:00–06:00 Asia/Shanghai`},
		{"meeting at 07:00", []BandInput{night, band("peak", "07:00", "09:00", "Asia/Shanghai")}, "", ""},
		{"meeting at 23:00, across midnight", []BandInput{night, band("evening", "18:00", "23:00", "Asia/Shanghai")}, "", ""},
		// Night 23:00–07:00 Asia/Shanghai is 15:00–23:00 UTC.
		{"two zones overlapping", []BandInput{band("peak", "09:00", "18:00", "UTC"), night},
			"time_bands[1]", `overlaps time_bands[0] ("peak") from 2026-01-01T15:00:00Z`},
		{"two zones meeting", []BandInput{band("peak", "09:00", "15:00", "UTC"), night}, "", ""},
		{"two zones overlapping in summer only", []BandInput{london, band("late", "23:00", "23:30", "UTC")},
			"time_bands[1]", `overlaps time_bands[0] ("london") from 2026-03-29T23:00:00Z`},
		{"two zones meeting in summer", []BandInput{london, band("late", "22:00", "23:00", "UTC")}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			in := CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
				Prices: []PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}, Bands: tt.bands}
			_, vs := ParseCard(in)
			var got, reason string
			if len(vs) > 0 {
				got, reason = vs[0].Field, vs[0].Reason
			}
			if got != tt.want || len(vs) > 1 || !strings.Contains(reason, tt.wantWhere) {
				t.Errorf("violations %v, want one on %q saying %q", vs, tt.want, tt.wantWhere)
			}
			if _, vs := LoadCard(in); len(vs) > 0 {
				t.Errorf("stored, the card is refused: %v", vs)
			}
		})
	}
	// Stored, 06:00–07:00 Asia/Shanghai (22:00–23:00 UTC) of 2.80 an hour
	// is priced by the band listed first, as before: ×0.80 or ×1.50.
	for _, order := range []struct {
		bands      []BandInput
		band, want string
	}{{[]BandInput{night, peak}, "night", "2.24"}, {[]BandInput{peak, night}, "peak", "4.2"}} {
		c, vs := LoadCard(CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}, Bands: order.bands})
		if len(vs) > 0 {
			t.Fatalf("stored card with %s first: %v", order.band, vs)
		}
		u := Usage{Model: "RTX_4090", GPUCount: 1, Start: time.Date(2026, 1, 5, 22, 0, 0, 0, time.UTC), End: time.Date(2026, 1, 5, 23, 0, 0, 0, time.UTC)}
		pieces, err := c.Rate(u, MonthUsage{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := render(c, u, pieces), "usage|"+order.band+"||1|"+order.want+"\ntotal "+order.want; got != want {
			t.Errorf("stored card with %s first: priced\n%s\nwant\n%s", order.band, got, want)
		}
	}
}
