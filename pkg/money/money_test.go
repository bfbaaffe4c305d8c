package money

import (
	"math"
	"math/big"
	"math/rand/v2"
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

func TestParsePrecision(t *testing.T) {
	if _, err := MustLookup("JPY").Parse("1.5"); err == nil {
		t.Error("JPY 1.5 accepted")
	}
	if _, err := MustLookup("CNY").Parse("1.505"); err == nil {
		t.Error("CNY 1.505 accepted")
	}
	if got, err := MustLookup("USDC").Parse("1.123456"); err != nil || !got.Equal(d("1.123456")) {
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

// Above int64's 9.22 × 10^18 minor units (9.22 ETH), exactly.
func TestAllocateBigAmounts(t *testing.T) {
	tests := []struct {
		cur, total string
		weights    []string
		want       []string
	}{
		{"ETH", "10", []string{"1", "1", "1"}, []string{"3.333333333333333334", "3.333333333333333333", "3.333333333333333333"}},
		{"ETH", "10", []string{"2.5", "1.5", "6"}, []string{"2.5", "1.5", "6"}},
		{"ETH", "-10", []string{"1", "2"}, []string{"-3.333333333333333333", "-6.666666666666666667"}},
		{"ETH", "123456789.123456789123456789", []string{"0.25", "0.75"}, []string{"30864197.280864197280864197", "92592591.842592591842592592"}},
		{"USDC", "9223372036854.775808", []string{"1", "1"}, []string{"4611686018427.387904", "4611686018427.387904"}},
		{"JPY", "100000000000000000000000000000", []string{"1", "2", "0"}, []string{"33333333333333333333333333333", "66666666666666666666666666667", "0"}},
	}
	for _, tt := range tests {
		var ws []decimal.Decimal
		for _, w := range tt.weights {
			ws = append(ws, d(w))
		}
		parts, err := MustLookup(tt.cur).Allocate(d(tt.total), ws)
		if err != nil {
			t.Errorf("Allocate(%s %s, %v): %v", tt.total, tt.cur, tt.weights, err)
			continue
		}
		for i := range tt.want {
			if !parts[i].Equal(d(tt.want[i])) {
				t.Errorf("Allocate(%s %s, %v) = %v, want %v", tt.total, tt.cur, tt.weights, parts, tt.want)
				break
			}
		}
	}
}

// drawUnits draws an amount in minor units across the whole range a numeric
// column holds in practice: its number of digits is uniform in 1..digitsMax, so
// amounts above int64 (19 digits) are drawn as often as small ones.
func drawUnits(t *rapid.T, label string) *big.Int {
	const digitsMax = 40
	n := rapid.IntRange(1, digitsMax).Draw(t, label+"_digits")
	digits := rapid.SliceOfN(rapid.IntRange(0, 9), n, n).Draw(t, label)
	u := new(big.Int)
	for _, x := range digits {
		u.Mul(u, big.NewInt(10)).Add(u, big.NewInt(int64(x)))
	}
	return u
}

// drawWeight draws a non-negative weight with up to 30 decimal places and a
// coefficient of up to 40 digits (the exact shares split.Compute passes are
// such decimals).
func drawWeight(t *rapid.T) decimal.Decimal {
	return decimal.NewFromBigInt(drawUnits(t, "w"), -rapid.Int32Range(0, 30).Draw(t, "w_exp"))
}

// Each part is its exact share rounded down or up (so within one minor unit of
// it), the parts sum to the total, and part i goes with weight i; the exact
// shares are computed here with big.Rat, independently of Allocate.
func TestAllocateProportionalAcrossTheRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := MustLookup(rapid.SampledFrom(Codes()).Draw(t, "cur"))
		units := drawUnits(t, "units")
		if rapid.Bool().Draw(t, "negative") {
			units.Neg(units)
		}
		total := decimal.NewFromBigInt(units, -cur.MinorUnits)
		n := rapid.IntRange(1, 8).Draw(t, "n")
		weights := make([]decimal.Decimal, n)
		sum := new(big.Rat)
		for i := range weights {
			weights[i] = drawWeight(t)
			sum.Add(sum, weights[i].Rat())
		}
		if sum.Sign() == 0 {
			weights[0] = decimal.NewFromInt(1)
			sum.SetInt64(1)
		}
		parts, err := cur.Allocate(total, weights)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != n {
			t.Fatalf("%d parts for %d weights", len(parts), n)
		}
		got := new(big.Int)
		for i, p := range parts {
			if !p.Equal(cur.Round(p)) {
				t.Fatalf("part %s not in %s minor units", p, cur.Code)
			}
			pu := p.Shift(cur.MinorUnits).BigInt()
			got.Add(got, pu)
			exact := new(big.Rat).Mul(new(big.Rat).SetInt(units), weights[i].Rat())
			exact.Quo(exact, sum)
			floor := new(big.Int).Div(exact.Num(), exact.Denom()) // Euclidean: floor for a positive denominator
			ceil := new(big.Int).Set(floor)
			if !exact.IsInt() {
				ceil.Add(ceil, big.NewInt(1))
			}
			if pu.Cmp(floor) < 0 || pu.Cmp(ceil) > 0 {
				t.Fatalf("part %d = %s units, exact share %s: not within one minor unit", i, pu, exact.FloatString(3))
			}
		}
		if got.Cmp(units) != 0 {
			t.Fatalf("parts sum to %s units, want %s", got, units)
		}
	})
}

// Format's fast path (amounts already in minor units, fitting an int64)
// writes what rounding and StringFixed write, for every exponent, sign and
// size around the edges.
func TestFormatFastPathIsStringFixed(t *testing.T) {
	var vals []int64
	for _, v := range []int64{0, 1, 5, 9, 10, 99, 100, 101, 999, 1000, 123456789, math.MaxInt64, math.MaxInt64 - 1} {
		vals = append(vals, v, -v)
	}
	vals = append(vals, math.MinInt64)
	for _, code := range []string{"JPY", "USD", "USDC", "ETH"} {
		c, err := Lookup(code)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			for _, exp := range []int32{-c.MinorUnits, -c.MinorUnits - 1, -c.MinorUnits + 1, 0, -8} {
				d := decimal.New(v, exp)
				want := c.Round(d).StringFixed(c.MinorUnits)
				if got := c.Format(d); got != want {
					t.Errorf("%s Format(%d×10^%d) = %q, want %q", code, v, exp, got, want)
				}
			}
		}
		big := decimal.RequireFromString("123456789012345678901234567890").Shift(-c.MinorUnits)
		if got, want := c.Format(big), c.Round(big).StringFixed(c.MinorUnits); got != want {
			t.Errorf("%s Format(%s) = %q, want %q", code, big, got, want)
		}
	}
}

// DecimalString writes what decimal's String writes: random coefficients
// of every size (past int64 and past 18 digits included), either sign,
// exponents on both sides of the fast path's range, zeros, and the zero
// value.
func TestDecimalStringIsDecimalsString(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 2026))
	check := func(d decimal.Decimal) {
		t.Helper()
		if got, want := DecimalString(d), d.String(); got != want {
			t.Fatalf("DecimalString(%v × 10^%d) = %q, want %q", d.Coefficient(), d.Exponent(), got, want)
		}
	}
	check(decimal.Decimal{})
	for _, c := range []int64{0, 1, -1, 10, 100, -100, 999999999999999999, -999999999999999999, 1000000000000000000, math.MaxInt64, math.MinInt64} {
		for exp := int32(-22); exp <= 3; exp++ {
			check(decimal.New(c, exp))
		}
	}
	for range 200_000 {
		var c *big.Int
		switch r.IntN(3) {
		case 0:
			c = big.NewInt(r.Int64N(1_000_000) - 500_000)
		case 1:
			c = big.NewInt(int64(r.Uint64()))
		default:
			c = new(big.Int).Mul(big.NewInt(int64(r.Uint64())), big.NewInt(r.Int64N(1_000_000)+1))
		}
		if r.IntN(4) == 0 {
			c.Mul(c, big.NewInt(1000)) // trailing zeros to drop
		}
		check(decimal.NewFromBigInt(c, int32(r.IntN(26))-22))
	}
	// Coefficients past int64, up to 40 digits, with up to 40 places (the
	// 128-bit path and both sides of its limits).
	for _, s := range []string{"9223372036854775808", "18446744073709551615", "18446744073709551616", "10000000000000000000",
		"99999999999999999999999999999999999999", "184467440737095516159999999999999999999", "184467440737095516160000000000000000000",
		"340282366920938463463374607431768211455", "340282366920938463463374607431768211456", "100000000000000000000000000000000000000"} {
		c, _ := new(big.Int).SetString(s, 10)
		for exp := int32(-42); exp <= 1; exp++ {
			check(decimal.NewFromBigInt(c, exp))
			check(decimal.NewFromBigInt(new(big.Int).Neg(c), exp))
		}
	}
	for range 200_000 {
		digits := make([]byte, 1+r.IntN(40))
		for i := range digits {
			digits[i] = byte('0' + r.IntN(10))
		}
		if r.IntN(3) == 0 { // trailing zeros to drop
			for i := len(digits) - 1 - r.IntN(len(digits)); i < len(digits); i++ {
				digits[i] = '0'
			}
		}
		c, _ := new(big.Int).SetString(string(digits), 10)
		if r.IntN(2) == 0 {
			c.Neg(c)
		}
		check(decimal.NewFromBigInt(c, int32(r.IntN(44))-42))
	}
}
