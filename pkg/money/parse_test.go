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

// Parse answers an amount at its currency's scale, whatever scale the text
// had: "10.000" yuan was kept with three decimals, saved under a top-up's
// idempotency key, and refused by Alipay's page-pay (more than 2 decimals):
// a 500 on every retry of the key.
func TestCurrencyParseCanonicalScale(t *testing.T) {
	tests := []struct {
		cur, give string
		wantCoef  string
		wantExp   int32
	}{
		{"CNY", "10.000", "1000", -2},
		{"CNY", "10.0000", "1000", -2},
		{"CNY", "10.5", "1050", -2},
		{"CNY", "10", "1000", -2},
		{"CNY", "1e3", "100000", -2},
		{"CNY", "-0.10", "-10", -2},
		{"JPY", "100.00", "100", 0},
		{"JPY", "1e2", "100", 0},
		{"ETH", "1", "1" + strings.Repeat("0", 18), -18},
		{"ETH", "0.000000000000000001000", "1", -18},
	}
	for _, tt := range tests {
		d, err := MustLookup(tt.cur).Parse(tt.give)
		if err != nil || d.Coefficient().String() != tt.wantCoef || d.Exponent() != tt.wantExp {
			t.Errorf("%s Parse(%q) = %se%d, %v; want %se%d", tt.cur, tt.give, d.Coefficient(), d.Exponent(), err, tt.wantCoef, tt.wantExp)
		}
	}
}

// Parse refuses an amount of more than AmountIntegerDigitsMax digits before
// the point: "1e62" was 63 digits, 66 characters once formatted with 2
// decimals, and the next hop's Parse refused it (longer than 64 characters):
// pricing's charges dead-lettered at the ledger, a balance settlement could
// not read.
func TestCurrencyParseMagnitude(t *testing.T) {
	nines := strings.Repeat("9", AmountIntegerDigitsMax)
	tests := []struct {
		cur, give string
		wantOK    bool
	}{
		{"CNY", nines + ".99", true},
		{"CNY", "-" + nines + ".99", true},
		{"JPY", nines, true},
		{"ETH", nines + "." + strings.Repeat("9", 18), true},
		{"CNY", "1" + strings.Repeat("0", AmountIntegerDigitsMax), false},
		{"CNY", "1e18", false},
		{"CNY", "-1e18", false},
		{"CNY", "1e62", false},
		{"JPY", "1e64", false},
		{"ETH", "1e18", false},
	}
	for _, tt := range tests {
		d, err := MustLookup(tt.cur).Parse(tt.give)
		if tt.wantOK {
			if err != nil {
				t.Errorf("%s Parse(%q): %v", tt.cur, tt.give, err)
			}
			continue
		}
		if !errors.Is(err, ErrAmountTooLarge) || !strings.Contains(err.Error(), "18 digits") {
			t.Errorf("%s Parse(%q) = %s, %v; want ErrAmountTooLarge naming the bound", tt.cur, tt.give, d, err)
		}
	}
}

// The largest amount of every currency, formatted as every hop formats it
// (Format, DecimalString), parses again; so does a balance of a billion of
// them, which ParseDecimal reads (settlement reads the ledger's balances).
func TestLargestAmountFormatsWithinBounds(t *testing.T) {
	for _, code := range Codes() {
		c := MustLookup(code)
		largest := decimal.New(1, AmountIntegerDigitsMax).Sub(c.Unit())
		for _, d := range []decimal.Decimal{largest, largest.Neg()} {
			for _, s := range []string{c.Format(d), DecimalString(d)} {
				if got, err := c.Parse(s); err != nil || !got.Equal(d) {
					t.Errorf("%s: %q parses to %s, %v", code, s, got, err)
				}
			}
			sum := d.Mul(decimal.NewFromInt(1_000_000_000))
			if _, err := ParseDecimal(c.Format(sum)); err != nil {
				t.Errorf("%s: a balance of a billion of the largest amount: %v", code, err)
			}
		}
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
