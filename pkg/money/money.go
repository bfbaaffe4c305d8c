// Package money holds the currency table, the one rounding rule and the
// largest-remainder allocation every money path in gpubill uses. Amounts are
// shopspring/decimal values with a separate ISO-style currency code; floats
// never touch money.
package money

import (
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"sort"
	"strconv"
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
	if d.Exponent() == -c.MinorUnits { // already in minor units (a ledger's sums): nothing to round
		if v := d.Coefficient(); v.IsInt64() {
			return formatUnits(v.Int64(), c.MinorUnits)
		}
	}
	return c.Round(d).StringFixed(c.MinorUnits)
}

// DecimalString is d.String(), byte for byte (the fraction's trailing
// zeros dropped), written without math/big's conversion when the exponent
// is between -38 and 0 and the coefficient fits in 128 bits: the ledger
// writes every posting's amount into its events and hashes it into the
// chain, and math/big's conversion was 5 % of its CPU posting a fetched
// batch of charges; pricing's exact amounts and GPU-hours (20 decimal
// places, a coefficient past int64) cost it ~3 % of the pipeline bench's
// rating.
func DecimalString(d decimal.Decimal) string {
	exp := d.Exponent()
	if exp > 0 || exp < -38 {
		return d.String()
	}
	if exp >= -18 && d.NumDigits() <= 18 { // no copy of the coefficient
		s := formatUnits(d.CoefficientInt64(), -exp)
		if exp < 0 {
			s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	return wideString(d, int(-exp))
}

// wideString is DecimalString for a coefficient of up to 128 bits (below
// 10^19 × 2^64) and places decimals, d.String() past that.
func wideString(d decimal.Decimal, places int) string {
	const e19 = 10_000_000_000_000_000_000
	c := d.Coefficient()
	var hi, lo uint64
	switch w := c.Bits(); {
	case len(w) == 0:
	case len(w) == 1:
		lo = uint64(w[0])
	case len(w) == 2 && bits.UintSize == 64:
		lo, hi = uint64(w[0]), uint64(w[1])
	default:
		return d.String()
	}
	if hi >= e19 {
		return d.String()
	}
	var buf [40]byte
	digits := buf[:0]
	if hi == 0 {
		digits = strconv.AppendUint(digits, lo, 10)
	} else {
		q, r := bits.Div64(hi, lo, e19)
		digits = strconv.AppendUint(digits, q, 10)
		var low [19]byte
		for i := len(low) - 1; i >= 0; i-- {
			low[i] = byte('0' + r%10)
			r /= 10
		}
		digits = append(digits, low[:]...)
	}
	var outBuf [88]byte // at most 42 bytes: a sign, then 39 digits and a point, or "0." and 38 places
	out := outBuf[:0]
	if c.Sign() < 0 {
		out = append(out, '-')
	}
	if n := len(digits) - places; n > 0 {
		out = append(out, digits[:n]...)
		if places > 0 {
			out = append(append(out, '.'), digits[n:]...)
		}
	} else {
		out = append(out, '0', '.')
		for ; n < 0; n++ {
			out = append(out, '0')
		}
		out = append(out, digits...)
	}
	if places > 0 {
		for out[len(out)-1] == '0' {
			out = out[:len(out)-1]
		}
		if out[len(out)-1] == '.' {
			out = out[:len(out)-1]
		}
	}
	return string(out)
}

// formatUnits writes v × 10^-places with exactly places decimals, as
// StringFixed does, without big-number arithmetic (a report formats
// hundreds of thousands of amounts).
func formatUnits(v int64, places int32) string {
	var buf [32]byte
	u := uint64(v)
	if v < 0 {
		u = -u // two's complement: right for math.MinInt64 too
	}
	i := len(buf)
	for k := int32(0); k < places; k++ {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	if places > 0 {
		i--
		buf[i] = '.'
	}
	for {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	if v < 0 {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

// Allocate splits total (already at the currency's minor unit) into parts
// proportional to weights using the largest-remainder method, so the parts
// always sum to total exactly. Weights must be non-negative and not all zero.
// Ties in remainders go to the earlier weight, so the result is deterministic.
//
// The arithmetic is on integers of any size (math/big): total in minor units
// and the weights scaled to integers by their common exponent, so each part is
// floor(total × w / Σw) plus at most one unit, exact for any amount (18-decimal
// ETH far above int64's 9.22 × 10^18 minor units included).
func (c Currency) Allocate(total decimal.Decimal, weights []decimal.Decimal) ([]decimal.Decimal, error) {
	if len(weights) == 0 {
		return nil, errors.New("allocate: no weights")
	}
	exp := int32(0)
	for _, w := range weights {
		if w.IsNegative() {
			return nil, errors.New("allocate: negative weight")
		}
		exp = min(exp, w.Exponent())
	}
	if !total.Equal(c.Round(total)) {
		return nil, fmt.Errorf("allocate: total %s is not in %s minor units", total, c.Code)
	}
	// Shift by -exp makes every weight an integer exactly (exp is the least exponent).
	ws := make([]*big.Int, len(weights))
	sum := new(big.Int)
	for i, w := range weights {
		ws[i] = w.Shift(-exp).BigInt()
		sum.Add(sum, ws[i])
	}
	if sum.Sign() == 0 {
		return nil, errors.New("allocate: weights sum to zero")
	}
	units := total.Shift(c.MinorUnits).BigInt() // exact: total is in minor units
	sign := units.Sign()
	units.Abs(units)
	parts := make([]*big.Int, len(weights))
	rems := make([]*big.Int, len(weights))
	allocated := new(big.Int)
	for i, w := range ws {
		parts[i], rems[i] = new(big.Int).QuoRem(new(big.Int).Mul(units, w), sum, new(big.Int))
		allocated.Add(allocated, parts[i])
	}
	// Every remainder is below sum, so fewer than len(weights) units are left:
	// one each to the largest remainders (all share the denominator sum).
	order := make([]int, len(weights))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rems[order[a]].Cmp(rems[order[b]]) > 0 })
	left := new(big.Int).Sub(units, allocated)
	if left.Sign() < 0 || left.Cmp(big.NewInt(int64(len(weights)))) >= 0 {
		return nil, fmt.Errorf("allocate: %s units left after the floors of %d parts", left, len(weights))
	}
	for k := int64(0); k < left.Int64(); k++ {
		parts[order[k]].Add(parts[order[k]], big.NewInt(1))
	}
	out := make([]decimal.Decimal, len(parts))
	check := decimal.Zero
	for i, p := range parts {
		if sign < 0 {
			p.Neg(p)
		}
		out[i] = decimal.NewFromBigInt(p, -c.MinorUnits)
		check = check.Add(out[i])
	}
	if !check.Equal(total) {
		return nil, fmt.Errorf("allocate: parts sum to %s, want %s", check, total)
	}
	return out, nil
}
