package domain

import "github.com/shopspring/decimal"

// DepositRefunds is a deposit (a renter's top-up, by its external_ref)
// with what has been taken back of it: what it credited to its wallet,
// whether it was reversed (all of it taken back), and what the
// unreversed rail_refunds naming it debited from that wallet in its
// currency. A rail_refund takes at most Remaining.
type DepositRefunds struct {
	DepositID    string
	Wallet       string
	Currency     string
	Amount       decimal.Decimal
	Reversed     bool
	RailRefunded decimal.Decimal
}

// Taken is what the deposit's reversal and rail refunds have taken back.
func (d DepositRefunds) Taken() decimal.Decimal {
	if d.Reversed {
		return d.RailRefunded.Add(d.Amount)
	}
	return d.RailRefunded
}

// Remaining is what a rail refund may still take of the deposit (never
// below zero).
func (d DepositRefunds) Remaining() decimal.Decimal {
	return decimal.Max(decimal.Zero, d.Amount.Sub(d.Taken()))
}
