package money

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shopspring/decimal"
)

// Bounds on a decimal string from outside (a request field, a CSV cell, a
// message), checked before it is parsed: a million-digit string or an
// exponent of a billion would otherwise cost seconds of CPU and megabytes of
// memory in every computation that follows. 64 characters hold any amount
// the currency table allows (ETH: 18 decimals) with room to spare.
const (
	DecimalCharsMax    = 64
	DecimalExponentMax = 64
)

// ErrNotDecimal is wrapped by every error ParseDecimal returns.
var ErrNotDecimal = errors.New("not a decimal number")

// AmountIntegerDigitsMax bounds an amount's magnitude: below 10^18 in any
// currency (a quintillion yuan, won or ether is no amount gpubill bills).
// ParseDecimal's bounds alone let "1e62" through, 66 characters once
// formatted with 2 decimals, which the next hop's Parse refused (pricing's
// charges dead-lettered at the ledger, balances settlement could not read).
// Under this bound every amount formats within DecimalCharsMax at every
// currency's scale (ETH: 18 digits, a point, 18 decimals and a sign: 38
// characters), a balance of a billion of them too (47), and its coefficient
// fits DecimalString's 128-bit path (36 digits of at most 38).
const AmountIntegerDigitsMax = 18

// amountLimit is 10^AmountIntegerDigitsMax, the least amount refused.
var amountLimit = decimal.New(1, AmountIntegerDigitsMax)

// ErrAmountTooLarge is wrapped by the error Parse returns for an amount
// beyond AmountIntegerDigitsMax digits before the point.
var ErrAmountTooLarge = errors.New("amount too large")

// ParseDecimal parses a decimal string from outside: optional sign, digits
// with an optional fraction, an optional exponent (e/E) of at most
// DecimalExponentMax in magnitude; surrounding spaces are ignored; at most
// DecimalCharsMax characters in all. The scan is linear and bounded before
// anything is allocated.
func ParseDecimal(s string) (decimal.Decimal, error) {
	if len(s) > DecimalCharsMax {
		return decimal.Decimal{}, fmt.Errorf("%w: longer than %d characters", ErrNotDecimal, DecimalCharsMax)
	}
	t := strings.TrimSpace(s)
	i := 0
	if i < len(t) && (t[i] == '+' || t[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(t) && isDigit(t[i]); i++ {
		digits++
	}
	if i < len(t) && t[i] == '.' {
		for i++; i < len(t) && isDigit(t[i]); i++ {
			digits++
		}
	}
	if digits == 0 {
		return decimal.Decimal{}, fmt.Errorf("%w: %q", ErrNotDecimal, s)
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		exp, expDigits := 0, 0
		for ; i < len(t) && isDigit(t[i]); i++ {
			exp = exp*10 + int(t[i]-'0') // checked each digit: never overflows
			expDigits++
			if exp > DecimalExponentMax {
				return decimal.Decimal{}, fmt.Errorf("%w: exponent beyond ±%d", ErrNotDecimal, DecimalExponentMax)
			}
		}
		if expDigits == 0 {
			return decimal.Decimal{}, fmt.Errorf("%w: %q", ErrNotDecimal, s)
		}
	}
	if i != len(t) {
		return decimal.Decimal{}, fmt.Errorf("%w: %q", ErrNotDecimal, s)
	}
	d, err := decimal.NewFromString(t)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%w: %q", ErrNotDecimal, s)
	}
	return d, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Parse parses an amount in c from outside: ParseDecimal's bounds, no more
// decimal places than c's minor unit, and at most AmountIntegerDigitsMax
// digits before the point. The amount is answered at c's scale whatever
// the text's ("10.000" CNY is 10.00): kept with the text's, a top-up of
// 10.000 yuan was saved under its key and then refused by Alipay (3
// decimals). Request hashes are scale-blind (String, DecimalString drop
// trailing zeros), so a replay hashes as before.
func (c Currency) Parse(s string) (decimal.Decimal, error) {
	d, err := ParseDecimal(s)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if !d.Equal(d.Truncate(c.MinorUnits)) {
		return decimal.Decimal{}, fmt.Errorf("amount %s has more than %d decimal places for %s", s, c.MinorUnits, c.Code)
	}
	if d.Abs().Cmp(amountLimit) >= 0 {
		return decimal.Decimal{}, fmt.Errorf("%w: %s has more than %d digits before the decimal point",
			ErrAmountTooLarge, strings.TrimSpace(s), AmountIntegerDigitsMax)
	}
	return d.Round(c.MinorUnits), nil // exact: d has no more places
}
