package domain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

func mustCard(t *testing.T, in CardInput) *Card {
	t.Helper()
	c, vs := ParseCard(in)
	if len(vs) > 0 {
		t.Fatalf("card: %v", vs)
	}
	return c
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// render prints pieces as "band|tier|GPU-hours|amount" lines and the total.
func render(c *Card, u Usage, ps []Piece) string {
	var b strings.Builder
	total := decimal.Zero
	for _, p := range ps {
		unit, mult := c.Factors(p, u.Model, u.Region)
		x := PriceSeconds(p.GPUMicros, unit, mult)
		total = total.Add(x)
		fmt.Fprintf(&b, "%s|%s|%s|%s|%s\n", p.Kind, c.BandName(p), c.TierLabel(p), GPUHours(p.GPUMicros).String(), Amount(x).String())
	}
	fmt.Fprintf(&b, "total %s", Amount(total))
	return b.String()
}

// rateCase is a usage rated alone by a card, and what render should show.
type rateCase struct {
	name string
	card *Card
	give Usage
	want string
}

// rateCases rates each case's usage on a fresh month.
func rateCases(t *testing.T, cases []rateCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := tt.card.Rate(tt.give, MonthUsage{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(tt.card, tt.give, ps); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestRateBandsAndZones(t *testing.T) {
	t.Parallel()
	night := func(tz string) *Card {
		return mustCard(t, CardInput{ID: "rc-1", Currency: "CNY", EffectiveFrom: ts("2026-01-01T00:00:00Z"),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "2.00"}, {Model: "RTX_4090", Region: "us-west", Hourly: "3.00"}},
			Bands:  []BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: tz, Multiplier: "0.80"}}})
	}
	tests := []rateCase{
		{
			name: "22:00-00:30 Shanghai is 1 h day + 1.5 h night",
			card: night("Asia/Shanghai"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T14:00:00Z"), End: ts("2026-11-01T16:30:00Z")},
			want: "usage|||1|2\nusage|night||1.5|2.4\ntotal 4.4",
		},
		{
			name: "exactly the night band",
			card: night("Asia/Shanghai"),
			give: Usage{Model: "RTX_4090", GPUCount: 2, Start: ts("2026-11-01T15:00:00Z"), End: ts("2026-11-01T23:00:00Z")},
			want: "usage|night||16|25.6\ntotal 25.6",
		},
		{
			name: "night into the next day's day band, across local midnight",
			card: night("Asia/Shanghai"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T22:30:00Z"), End: ts("2026-11-01T23:30:00Z")},
			want: "usage|night||0.5|0.8\nusage|||0.5|1\ntotal 1.8",
		},
		{
			name: "UTC midnight inside a Shanghai day is no edge",
			card: night("Asia/Shanghai"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T23:00:00Z"), End: ts("2026-11-02T01:00:00Z")},
			want: "usage|||2|4\ntotal 4",
		},
		{
			name: "the same instants under a New York night band",
			card: night("America/New_York"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T14:00:00Z"), End: ts("2026-11-01T16:30:00Z")},
			want: "usage|||2.5|5\ntotal 5",
		},
		{
			name: "New York night across its DST end (01:00 EDT to 08:00 EST is 8 h)",
			card: night("America/New_York"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T05:00:00Z"), End: ts("2026-11-01T13:00:00Z")},
			want: "usage|night||7|11.2\nusage|||1|2\ntotal 13.2",
		},
		{
			name: "region price",
			card: night("Asia/Shanghai"),
			give: Usage{Model: "RTX_4090", Region: "us-west", GPUCount: 1, Start: ts("2026-11-01T01:00:00Z"), End: ts("2026-11-01T02:00:00Z")},
			want: "usage|||1|3\ntotal 3",
		},
		{
			name: "a second is priced exactly (shown to 20 places)",
			card: night("Asia/Shanghai"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T01:00:00Z"), End: ts("2026-11-01T01:00:01Z")},
			want: "usage|||0.00027777777777777778|0.00055555555555555556\ntotal 0.00055555555555555556",
		},
	}
	rateCases(t, tests)
}

// A band edge on a day its zone's clock jumps is crossed when the wall
// clock crosses it: at the jump when the edge falls in the skipped hour, and
// twice when it falls in the repeated one. Cut where Go's time.Date places a
// wall time that does not exist (30 minutes before the jump), a band ending
// in the gap held the whole rest of the usage, one starting there none of
// it; and a band edge in the repeated hour was crossed once.
func TestRateBandEdgesOnDaylightSavingDays(t *testing.T) {
	t.Parallel()
	band := func(start, end string) *Card {
		return mustCard(t, CardInput{ID: "rc-dst", Currency: "USD", EffectiveFrom: ts("2026-01-01T00:00:00Z"),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "2.00"}},
			Bands:  []BandInput{{Name: "night", Start: start, End: end, TimeZone: "America/New_York", Multiplier: "0.80"}}})
	}
	tests := []rateCase{
		{
			name: "a band ending at 02:30, skipped on 8 March: left at the jump",
			card: band("23:00", "02:30"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-03-08T06:00:00Z"), End: ts("2026-03-08T16:00:00Z")},
			want: "usage|night||1|1.6\nusage|||9|18\ntotal 19.6",
		},
		{
			name: "a band starting at 02:30, skipped on 8 March: entered at the jump",
			card: band("02:30", "06:00"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-03-08T06:00:00Z"), End: ts("2026-03-08T12:00:00Z")},
			want: "usage|||1|2\nusage|night||3|4.8\nusage|||2|4\ntotal 10.8",
		},
		{
			name: "a band ending at 01:30, twice on 1 November: left, entered again, left",
			card: band("23:00", "01:30"),
			give: Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-01T04:00:00Z"), End: ts("2026-11-01T08:00:00Z")},
			want: "usage|night||1.5|2.4\nusage|||0.5|1\nusage|night||0.5|0.8\nusage|||1.5|3\ntotal 7.2",
		},
	}
	rateCases(t, tests)
}

func TestRateTiersAcrossMonths(t *testing.T) {
	t.Parallel()
	card := mustCard(t, CardInput{ID: "rc-t", Currency: "USD", EffectiveFrom: ts("2026-01-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "H100", Hourly: "2.00"}},
		Tiers:  []TierInput{{UpToGPUHours: "10", Discount: "0"}, {UpToGPUHours: "100", Discount: "0.10"}, {Discount: "0.25"}},
	})
	tests := []struct {
		name string
		used MonthUsage
		give Usage
		want string
	}{
		{
			name: "fresh month, first tier",
			used: MonthUsage{},
			give: Usage{Model: "H100", GPUCount: 2, Start: ts("2026-11-10T00:00:00Z"), End: ts("2026-11-10T02:00:00Z")},
			want: "usage||0-10 GPU-h|4|8\ntotal 8",
		},
		{
			name: "crossing into the second tier mid-usage",
			used: MonthUsage{"2026-11": 9 * hourMicro},
			give: Usage{Model: "H100", GPUCount: 2, Start: ts("2026-11-10T00:00:00Z"), End: ts("2026-11-10T01:00:00Z")},
			want: "usage||0-10 GPU-h|1|2\nusage||10-100 GPU-h|1|1.8\ntotal 3.8",
		},
		{
			name: "month boundary resets the volume",
			used: MonthUsage{"2026-10": 99 * hourMicro},
			give: Usage{Model: "H100", GPUCount: 1, Start: ts("2026-10-31T22:00:00Z"), End: ts("2026-11-01T01:00:00Z")},
			want: "usage||10-100 GPU-h|1|1.8\nusage||100+ GPU-h|1|1.5\nusage||0-10 GPU-h|1|2\ntotal 5.3",
		},
		{
			name: "unbounded top tier",
			used: MonthUsage{"2026-11": 500 * hourMicro},
			give: Usage{Model: "H100", GPUCount: 4, Start: ts("2026-11-10T00:00:00Z"), End: ts("2026-11-10T00:30:00Z")},
			want: "usage||100+ GPU-h|2|3\ntotal 3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := card.Rate(tt.give, tt.used, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(card, tt.give, ps); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestRatePUESurcharge(t *testing.T) {
	t.Parallel()
	card := mustCard(t, CardInput{ID: "rc-p", Currency: "USD", EffectiveFrom: ts("2026-01-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "A100", Hourly: "1.20"}}, PUE: &PUEInput{Threshold: "1.5", PerGPUHour: "0.05"}})
	pue := func(s string) *decimal.Decimal { d := decimal.RequireFromString(s); return &d }
	tests := []struct {
		name string
		give *decimal.Decimal
		want string
	}{
		{"below threshold", pue("1.49"), "usage|||2|2.4\ntotal 2.4"},
		{"at threshold", pue("1.5"), "usage|||2|2.4\npue_surcharge|||2|0.1\ntotal 2.5"},
		{"unknown PUE", nil, "usage|||2|2.4\ntotal 2.4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := Usage{Model: "A100", GPUCount: 2, Start: ts("2026-11-10T00:00:00Z"), End: ts("2026-11-10T01:00:00Z"), PUE: tt.give}
			ps, err := card.Rate(u, MonthUsage{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(card, u, ps); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestCumulativeRounding(t *testing.T) {
	t.Parallel()
	cny := money.MustLookup("CNY")
	tests := []struct {
		name string
		give []string // exact amounts of successive usage, as price-seconds / 3600
		want []string // charges
	}{
		{"three half-hours at 0.01/h bill 0.02", []string{"0.005", "0.005", "0.005"}, []string{"0.01", "0", "0.01"}},
		{"tiny amounts accumulate", []string{"0.001", "0.001", "0.001", "0.001", "0.001"}, []string{"0", "0", "0", "0", "0.01"}},
		{"half away from zero", []string{"0.004", "0.001"}, []string{"0", "0.01"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lt LeaseTotal
			sum, exact := decimal.Zero, decimal.Zero
			for i, g := range tt.give {
				exact = exact.Add(decimal.RequireFromString(g))
				ps := decimal.RequireFromString(g).Mul(secondsPerHour)
				got := lt.Add(cny, ps)
				sum = sum.Add(got)
				if !got.Equal(decimal.RequireFromString(tt.want[i])) {
					t.Errorf("charge %d: got %s, want %s", i, got, tt.want[i])
				}
			}
			// The charges sum to the inputs' exact total rounded once (to
			// cents, half away from zero), computed here from the inputs.
			if want := exact.Round(2); !sum.Equal(want) {
				t.Errorf("billed %s != round(Σ inputs %s) = %s", sum, exact, want)
			}
		})
	}
}

func TestBookPicksNewestEffective(t *testing.T) {
	t.Parallel()
	mk := func(id, from string, seq int64) *Card {
		c := mustCard(t, CardInput{ID: id, Currency: "CNY", EffectiveFrom: ts(from), Prices: []PriceInput{{Model: "A6000", Hourly: "1"}}})
		c.Seq = seq
		return c
	}
	b := NewBook([]*Card{mk("old", "2026-01-01T00:00:00Z", 1), mk("new", "2026-11-01T00:00:00Z", 2), mk("newer-same-day", "2026-11-01T00:00:00Z", 3)})
	tests := []struct {
		give time.Time
		want string
	}{
		{ts("2026-10-31T23:59:59Z"), "old"},
		{ts("2026-11-01T00:00:00Z"), "newer-same-day"},
		{ts("2025-12-31T00:00:00Z"), ""},
	}
	for _, tt := range tests {
		c, _ := b.For("CNY", tt.give)
		got := ""
		if c != nil {
			got = c.ID
		}
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.give, got, tt.want)
		}
	}
}

// Month edges are cut as instants, not through their "2006-01" keys: a
// usage into year 10000 (whose key is "10000-01") is cut at that month's
// start, never at the zero time (a piece from year 1 to the usage).
func TestCutsAtMonthEdgesPastYear9999(t *testing.T) {
	c := &Card{}
	start := time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC)
	end := time.Date(10000, 1, 1, 1, 0, 0, 0, time.UTC)
	got := c.cuts(start, end)
	want := []time.Time{start, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), end}
	if len(got) != len(want) {
		t.Fatalf("cuts %v; want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("cuts %v; want %v", got, want)
		}
	}
}

// TestMonthKeyIsFormat: the hand-written MonthKey is Format("2006-01") in
// UTC, for instants in other zones, around year edges and outside 0..9999.
func TestMonthKeyIsFormat(t *testing.T) {
	east := time.FixedZone("UTC+8", 8*3600)
	ts := []time.Time{
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2027, 1, 1, 7, 0, 0, 0, east), time.Date(2026, 10, 1, 3, 0, 0, 0, east),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(10000, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 5, 1, 0, 0, 0, 0, time.UTC), {},
	}
	for d := 0; d < 800; d += 7 {
		ts = append(ts, time.Date(2025, 1, 1, 0, 0, 0, 0, east).AddDate(0, 0, d))
	}
	for _, tt := range ts {
		if got, want := MonthKey(tt), tt.UTC().Format("2006-01"); got != want {
			t.Errorf("MonthKey(%s) = %q, want %q", tt, got, want)
		}
	}
}

// A region's price is found however the usage spells the region's case
// or white space ("CN-EAST" was priced at the model's default, silently);
// the price spelled as the usage spells it comes first, and a region the
// card does not name gets the default.
func TestPriceRegionSpelledAnotherWay(t *testing.T) {
	c := mustCard(t, CardInput{ID: "rc-r", Currency: "CNY", EffectiveFrom: ts("2026-01-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "H100", Hourly: "2.00"}, {Model: "H100", Region: "cn-east", Hourly: "3.00"},
			{Model: "H100", Region: "EU-WEST", Hourly: "4.00"}, {Model: "H100", Region: "eu-west", Hourly: "5.00"}}})
	for region, want := range map[string]string{"cn-east": "3", "CN-EAST": "3", " Cn-East ": "3", "EU-WEST": "4", "eu-west": "5",
		"Eu-West": "4", "us-west": "2", "": "2"} {
		if p, ok := c.Price("H100", region); !ok || !p.Equal(decimal.RequireFromString(want)) {
			t.Errorf("H100 in %q: %s %v, want %s", region, p, ok, want)
		}
	}
}

// A month's volume counts every GPU-hour the renter used in it, also those
// a card without tiers priced: 120 GPU-hours on such a card, then 10 on a
// card tiered at 100 priced the 10 in the first tier (100.00 where 90.00
// was due), the month's volume read as 10.
func TestUntieredCardCountsTowardTheMonth(t *testing.T) {
	t.Parallel()
	a := mustCard(t, CardInput{ID: "a", Currency: "CNY", EffectiveFrom: ts("2026-11-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}}})
	b := mustCard(t, CardInput{ID: "b", Currency: "CNY", EffectiveFrom: ts("2026-11-15T00:00:00Z"),
		Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}},
		Tiers:  []TierInput{{UpToGPUHours: "100", Discount: "0"}, {Discount: "0.10"}}})
	used := MonthUsage{}
	first := Usage{Model: "RTX_4090", GPUCount: 8, Start: ts("2026-11-02T00:00:00Z"), End: ts("2026-11-02T15:00:00Z")}
	if _, err := a.Rate(first, used, nil); err != nil {
		t.Fatal(err)
	}
	if used["2026-11"] != 120*hourMicro {
		t.Errorf("after 120 GPU-hours on the untiered card, the month's volume is %v GPU-µs", used["2026-11"])
	}
	later := Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-20T00:00:00Z"), End: ts("2026-11-20T10:00:00Z")}
	ps, err := b.Rate(later, used, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(b, later, ps), "usage||100+ GPU-h|10|90\ntotal 90"; got != want {
		t.Errorf("10 GPU-hours past 120 in the month:\n%s\nwant\n%s", got, want)
	}
}

// A band is in force for part of each day: 00:00–24:00 (all day: a price,
// not a band) and a start of 24:00 (never in force: its card saved a band
// that discounted nothing) are refused, naming the band.
func TestBandCoversPartOfADay(t *testing.T) {
	t.Parallel()
	for _, b := range [][2]string{{"00:00", "24:00"}, {"24:00", "00:00"}, {"24:00", "07:00"}, {"07:00", "07:00"}} {
		_, vs := ParseCard(CardInput{ID: "rc-b", Currency: "CNY", EffectiveFrom: ts("2026-11-01T00:00:00Z"),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}},
			Bands:  []BandInput{{Name: "night", Start: b[0], End: b[1], TimeZone: "Asia/Shanghai", Multiplier: "0.80"}}})
		if len(vs) == 0 || !strings.HasPrefix(vs[0].Field, "time_bands[0]") {
			t.Errorf("band %s–%s: violations %v, want one on time_bands[0]", b[0], b[1], vs)
		}
	}
	if _, vs := ParseCard(CardInput{ID: "rc-b", Currency: "CNY", EffectiveFrom: ts("2026-11-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}},
		Bands:  []BandInput{{Name: "evening", Start: "18:00", End: "24:00", TimeZone: "Asia/Shanghai", Multiplier: "0.90"}}}); len(vs) != 0 {
		t.Errorf("band 18:00–24:00: %v", vs)
	}
}

// A band's zone is named: "Local" (the host's zone to time.LoadLocation)
// priced the same usage by each replica's TZ.
func TestBandZoneIsNotTheHosts(t *testing.T) {
	t.Parallel()
	for _, tz := range []string{"Local", "local"} {
		_, vs := ParseCard(CardInput{ID: "rc-z", Currency: "CNY", EffectiveFrom: ts("2026-11-01T00:00:00Z"),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}},
			Bands:  []BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: tz, Multiplier: "0.80"}}})
		if len(vs) != 1 || vs[0].Field != "time_bands[0].timezone" {
			t.Errorf("zone %q: violations %v, want one on time_bands[0].timezone", tz, vs)
		}
	}
}

// A stored card is read as it meant when stored (LoadCard): a band from
// 24:00 and a band 00:00–24:00, which ParseCard refuses today, price as
// they did before (from 24:00 to 07:00: 00:00–07:00; from 24:00 to 00:00:
// never; 00:00–24:00: all day); a band whose start equals its end, refused
// by every version, still is.
func TestStoredBandShapesPriceAsWhenStored(t *testing.T) {
	t.Parallel()
	// GPU-minutes of 22:00–02:00 Asia/Shanghai (14:00–18:00 UTC) in the band.
	tests := []struct {
		start, end string
		want       int64
	}{
		{"24:00", "07:00", 120},
		{"24:00", "00:00", 0},
		{"00:00", "24:00", 240},
	}
	for _, tt := range tests {
		in := CardInput{ID: "rc-s", Currency: "CNY", EffectiveFrom: ts("2026-11-01T00:00:00Z"),
			Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}},
			Bands:  []BandInput{{Name: "night", Start: tt.start, End: tt.end, TimeZone: "Asia/Shanghai", Multiplier: "0.80"}}}
		if _, vs := ParseCard(in); len(vs) == 0 {
			t.Errorf("band %s–%s: a new card with it was accepted", tt.start, tt.end)
		}
		c, vs := LoadCard(in)
		if len(vs) != 0 {
			t.Errorf("band %s–%s: stored card not read: %v", tt.start, tt.end, vs)
			continue
		}
		pieces, err := c.Rate(Usage{Model: "RTX_4090", GPUCount: 1, Start: ts("2026-11-02T14:00:00Z"), End: ts("2026-11-02T18:00:00Z")}, MonthUsage{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var in0 int64
		for _, p := range pieces {
			if p.Band == 0 {
				in0 += p.GPUMicros
			}
		}
		if got := in0 / int64(time.Minute/time.Microsecond); got != tt.want {
			t.Errorf("band %s–%s: %d GPU-minutes in the band, want %d", tt.start, tt.end, got, tt.want)
		}
	}
	_, vs := LoadCard(CardInput{ID: "rc-s", Currency: "CNY", EffectiveFrom: ts("2026-11-01T00:00:00Z"),
		Prices: []PriceInput{{Model: "RTX_4090", Hourly: "10"}},
		Bands:  []BandInput{{Name: "night", Start: "07:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"}}})
	if len(vs) != 1 || vs[0].Field != "time_bands[0]" {
		t.Errorf("band 07:00–07:00 stored: violations %v, want one on time_bands[0]", vs)
	}
}
