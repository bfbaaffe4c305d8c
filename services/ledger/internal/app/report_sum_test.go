package app

import (
	"math/rand/v2"
	"testing"

	"github.com/shopspring/decimal"
)

// exactSum equals decimal addition term for term: same exponents (the
// int64 path), a term with another exponent, coefficients of 18 and 19
// digits and sums past int64 either way (the decimal path from there on).
func TestExactSumIsDecimalAddition(t *testing.T) {
	d := decimal.RequireFromString
	cases := map[string][]decimal.Decimal{
		"none":                 nil,
		"cents":                {d("12.50"), d("-3.25"), d("0.01")},
		"another scale":        {d("12.50"), d("1.5"), d("-0.001")},
		"18 digits":            {d("999999999999999999"), d("-999999999999999999"), d("1")},
		"19 digits past int64": {d("1.00"), d("99999999999999999.99"), d("-1.00")},
		"19 digits":            {d("1.00"), d("12345678901234567.89"), d("-1.00")},
	}
	var up, down []decimal.Decimal // 18-digit terms whose sum passes int64
	for range 10 {
		up, down = append(up, d("9999999999999999.99")), append(down, d("-9999999999999999.99"))
	}
	cases["past int64 up"], cases["past int64 down"] = append(up, d("-0.01")), append(down, d("0.01"))
	rng := rand.New(rand.NewPCG(5, 6))
	var random []decimal.Decimal
	for range 10_000 {
		random = append(random, decimal.New(rng.Int64N(2e18-1)-(1e18-1), -2))
	}
	cases["random 18-digit cents"] = random
	for name, terms := range cases {
		var s exactSum
		want := decimal.Zero
		for i, x := range terms {
			s.add(x)
			want = want.Add(x)
			if got := s.value(); !got.Equal(want) {
				t.Fatalf("%s: after %d terms %s, want %s", name, i+1, got, want)
			}
		}
		if len(terms) == 0 && (s.value() != decimal.Decimal{}) {
			t.Fatalf("%s: %v, want the zero Decimal", name, s.value())
		}
		if s.terms != len(terms) {
			t.Fatalf("%s: %d terms counted, want %d", name, s.terms, len(terms))
		}
	}
}
