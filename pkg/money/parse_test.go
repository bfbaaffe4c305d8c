package money

import (
	"errors"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func TestParseDecimal(t *testing.T) {
	tests := []struct {
		give string
		want string // "" = refused
	}{
		{"12.50", "12.5"},
		{" -0.000001 ", "-0.000001"},
		{"+7", "7"},
		{".5", "0.5"},
		{"5.", "5"},
		{"1e3", "1000"},
		{"1.5E-2", "0.015"},
		{"1e64", "1" + strings.Repeat("0", 64)},
		{"123456789012345678901234567890.123456789012345678", "123456789012345678901234567890.123456789012345678"},
		{"1e65", ""},
		{"1e-65", ""},
		{"1e999999999", ""},
		{"1" + strings.Repeat("0", 64), ""},
		{"1" + strings.Repeat("0", 999_999), ""},
		{"", ""},
		{"-", ""},
		{".", ""},
		{"1e", ""},
		{"1e+", ""},
		{"0x10", ""},
		{"1_000", ""},
		{"NaN", ""},
		{"Infinity", ""},
		{"1.2.3", ""},
		{"1 2", ""},
		{"１２", ""}, // full-width digits
		{"12\x00", ""},
	}
	for _, tt := range tests {
		got, err := ParseDecimal(tt.give)
		if tt.want == "" {
			if err == nil || !errors.Is(err, ErrNotDecimal) {
				t.Errorf("ParseDecimal(%.30q) = %s, %v; want ErrNotDecimal", tt.give, got, err)
			}
			continue
		}
		if err != nil || !got.Equal(decimal.RequireFromString(tt.want)) {
			t.Errorf("ParseDecimal(%.30q) = %s, %v; want %s", tt.give, got, err, tt.want)
		}
	}
}

func TestCurrencyParse(t *testing.T) {
	cny, eth := MustLookup("CNY"), MustLookup("ETH")
	if _, err := cny.Parse("1.001"); err == nil {
		t.Error("CNY 1.001 accepted")
	}
	if d, err := eth.Parse("10.000000000000000001"); err != nil || d.String() != "10.000000000000000001" {
		t.Errorf("ETH: %s %v", d, err)
	}
	if _, err := cny.Parse(strings.Repeat("9", 1_000_000)); !errors.Is(err, ErrNotDecimal) {
		t.Errorf("a million digits: %v", err)
	}
}

// FuzzParseDecimal: whatever ParseDecimal accepts fits its bounds and means
// what shopspring/decimal reads in it.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"12.50", "-1e-3", "1e64", "1e65", ".5", "+0", "1" + strings.Repeat("0", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDecimal(s)
		if err != nil {
			return
		}
		if len(s) > DecimalCharsMax {
			t.Fatalf("accepted %d characters", len(s))
		}
		want, err := decimal.NewFromString(strings.TrimSpace(s))
		if err != nil || !want.Equal(d) {
			t.Fatalf("ParseDecimal(%q) = %s, NewFromString = %s, %v", s, d, want, err)
		}
		if e := d.Exponent(); e > 2*DecimalExponentMax || e < -2*DecimalExponentMax {
			t.Fatalf("exponent %d", e)
		}
	})
}
