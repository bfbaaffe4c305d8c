package money

import (
	"testing"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestRoundHalfAwayFromZero(t *testing.T) {
	tests := []struct {
		give, cur, want string
	}{
		{"0.005", "USD", "0.01"},
		{"-0.005", "USD", "-0.01"},
		{"0.004999", "CNY", "0"},
		{"2.5", "JPY", "3"},
		{"-2.5", "JPY", "-3"},
		{"0.0000005", "USDC", "0.000001"},
		{"1.0000000000000000005", "ETH", "1.000000000000000001"},
	}
	for _, tt := range tests {
		got := MustLookup(tt.cur).Round(d(tt.give))
		if !got.Equal(d(tt.want)) {
			t.Errorf("Round(%s %s) = %s, want %s", tt.give, tt.cur, got, tt.want)
		}
	}
}

func TestParseAmountPrecision(t *testing.T) {
	if _, err := MustLookup("JPY").ParseAmount("1.5"); err == nil {
		t.Error("JPY 1.5 accepted")
	}
	if _, err := MustLookup("CNY").ParseAmount("1.505"); err == nil {
		t.Error("CNY 1.505 accepted")
	}
	if got, err := MustLookup("USDC").ParseAmount("1.123456"); err != nil || !got.Equal(d("1.123456")) {
		t.Errorf("USDC 1.123456: %v %v", got, err)
	}
	if _, err := Lookup("XXX"); err == nil {
		t.Error("unknown currency accepted")
	}
}

func TestAllocateExample(t *testing.T) {
	parts, err := MustLookup("CNY").Allocate(d("100.00"), []decimal.Decimal{d("1"), d("1"), d("1")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"33.34", "33.33", "33.33"}
	for i := range want {
		if !parts[i].Equal(d(want[i])) {
			t.Fatalf("parts = %v, want %v", parts, want)
		}
	}
}

func TestAllocateSumsToTotal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := MustLookup(rapid.SampledFrom([]string{"USD", "JPY", "USDC", "ETH"}).Draw(t, "cur"))
		total := decimal.New(rapid.Int64Range(-1e12, 1e12).Draw(t, "units"), -cur.MinorUnits)
		n := rapid.IntRange(1, 8).Draw(t, "n")
		weights := make([]decimal.Decimal, n)
		nonzero := false
		for i := range weights {
			w := rapid.Int64Range(0, 1e6).Draw(t, "w")
			nonzero = nonzero || w > 0
			weights[i] = decimal.New(w, -3)
		}
		if !nonzero {
			weights[0] = decimal.NewFromInt(1)
		}
		parts, err := cur.Allocate(total, weights)
		if err != nil {
			t.Fatal(err)
		}
		sum := decimal.Zero
		for _, p := range parts {
			sum = sum.Add(p)
			if !p.Equal(cur.Round(p)) {
				t.Fatalf("part %s not in minor units", p)
			}
		}
		if !sum.Equal(total) {
			t.Fatalf("sum %s != total %s", sum, total)
		}
	})
}
