// Package money holds the currency table, the one rounding rule and the
// largest-remainder allocation every money path in gpubill uses. Amounts are
// shopspring/decimal values with a separate ISO-style currency code; floats
// never touch money.
package money

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"
)

// Currency describes one currency's minor unit: the number of decimal places
// an amount in that currency may carry.
type Currency struct {
	Code       string
	MinorUnits int32
}

// currencies is the table of supported currencies. Minor units always come
// from here, never from a hard-coded 2.
var currencies = map[string]Currency{
	"USD":  {"USD", 2},
	"CNY":  {"CNY", 2},
	"EUR":  {"EUR", 2},
	"GBP":  {"GBP", 2},
	"HKD":  {"HKD", 2},
	"SGD":  {"SGD", 2},
	"JPY":  {"JPY", 0},
	"KRW":  {"KRW", 0},
	"USDC": {"USDC", 6},
	"USDT": {"USDT", 6},
	"ETH":  {"ETH", 18},
}

// ErrUnknownCurrency is returned for a currency code outside the table.
var ErrUnknownCurrency = errors.New("unknown currency")

// Lookup returns the currency for a code (case-insensitive).
func Lookup(code string) (Currency, error) {
	c, ok := currencies[strings.ToUpper(strings.TrimSpace(code))]
	if !ok {
		return Currency{}, fmt.Errorf("%w %q", ErrUnknownCurrency, code)
	}
	return c, nil
}

// MustLookup is Lookup for codes known at compile time (tests, defaults).
func MustLookup(code string) Currency {
	c, err := Lookup(code)
	if err != nil {
		panic(err)
	}
	return c
}

// Codes lists the supported currency codes, sorted.
func Codes() []string {
	out := make([]string, 0, len(currencies))
	for k := range currencies {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Round rounds d to the currency's minor unit, half away from zero.
// decimal.Round rounds half away from zero ("banker's" is RoundBank).
func (c Currency) Round(d decimal.Decimal) decimal.Decimal {
	return d.Round(c.MinorUnits)
}

// Unit is the smallest representable amount (0.01 for CNY, 1 for JPY).
func (c Currency) Unit() decimal.Decimal {
	return decimal.New(1, -c.MinorUnits)
}

// Format renders an amount with exactly the currency's minor units.
func (c Currency) Format(d decimal.Decimal) string {
	return c.Round(d).StringFixed(c.MinorUnits)
}

// ParseAmount parses a decimal string and checks that it carries no more
// precision than the currency's minor unit allows.
func (c Currency) ParseAmount(s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(strings.TrimSpace(s))
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("amount %q is not a decimal number", s)
	}
	if !d.Equal(d.Truncate(c.MinorUnits)) {
		return decimal.Decimal{}, fmt.Errorf("amount %s has more than %d decimal places for %s", s, c.MinorUnits, c.Code)
	}
	return d, nil
}

// Allocate splits total (already at the currency's minor unit) into parts
// proportional to weights using the largest-remainder method, so the parts
// always sum to total exactly. Weights must be non-negative and not all zero.
// Ties in remainders go to the earlier weight, so the result is deterministic.
func (c Currency) Allocate(total decimal.Decimal, weights []decimal.Decimal) ([]decimal.Decimal, error) {
	if len(weights) == 0 {
		return nil, errors.New("allocate: no weights")
	}
	sum := decimal.Zero
	for _, w := range weights {
		if w.IsNegative() {
			return nil, errors.New("allocate: negative weight")
		}
		sum = sum.Add(w)
	}
	if sum.IsZero() {
		return nil, errors.New("allocate: weights sum to zero")
	}
	if !total.Equal(c.Round(total)) {
		return nil, fmt.Errorf("allocate: total %s is not in %s minor units", total, c.Code)
	}
	unit := c.Unit()
	// Work in integer minor units: total/unit is exact.
	units := total.Div(unit).IntPart()
	sign := int64(1)
	if units < 0 {
		sign, units = -1, -units
	}
	type rem struct {
		idx int
		r   decimal.Decimal
	}
	parts := make([]int64, len(weights))
	rems := make([]rem, len(weights))
	allocated := int64(0)
	unitsDec := decimal.NewFromInt(units)
	for i, w := range weights {
		exact := unitsDec.Mul(w).DivRound(sum, 30)
		floor := exact.Floor()
		parts[i] = floor.IntPart()
		allocated += parts[i]
		rems[i] = rem{i, exact.Sub(floor)}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r.GreaterThan(rems[b].r) })
	for k := int64(0); k < units-allocated; k++ {
		parts[rems[k%int64(len(rems))].idx]++
	}
	out := make([]decimal.Decimal, len(parts))
	check := decimal.Zero
	for i, p := range parts {
		out[i] = decimal.NewFromInt(sign * p).Mul(unit)
		check = check.Add(out[i])
	}
	if !check.Equal(total) {
		return nil, fmt.Errorf("allocate: parts sum to %s, want %s", check, total)
	}
	return out, nil
}
