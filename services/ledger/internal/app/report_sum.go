package app

import "github.com/shopspring/decimal"

// exactSum adds decimals exactly and cheaply: in int64 units of 10^exp
// while every term has the first one's exponent and the total fits, in
// decimal.Decimal (arbitrary precision) from the first term that does not.
// A report adds up hundreds of thousands of balances, nearly all in the
// currency's minor units: big-number additions would be a quarter of its CPU.
type exactSum struct {
	units int64
	exp   int32
	terms int
	slow  bool
	big   decimal.Decimal
}

// add adds d.
func (s *exactSum) add(d decimal.Decimal) {
	if !s.slow {
		if s.terms == 0 {
			s.exp = d.Exponent()
		}
		if d.Exponent() == s.exp && d.NumDigits() <= 18 {
			v := d.CoefficientInt64()
			sum := s.units + v
			// Signed overflow: both terms of one sign, the sum of the other.
			if (s.units >= 0) != (v >= 0) || (sum >= 0) == (v >= 0) {
				s.units, s.terms = sum, s.terms+1
				return
			}
		}
		s.big, s.slow = s.value(), true
	}
	s.big, s.terms = s.big.Add(d), s.terms+1
}

// value is the sum: the zero Decimal when nothing was added (as an
// untouched field of a line), else with the terms' exponent.
func (s *exactSum) value() decimal.Decimal {
	switch {
	case s.slow:
		return s.big
	case s.terms == 0:
		return decimal.Decimal{}
	}
	return decimal.New(s.units, s.exp)
}
