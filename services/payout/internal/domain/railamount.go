package domain

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// RailAmountFlag is what the rail held under a payout attempt's reference
// when the payout was flagged FailRailAmountMismatch, and finance's
// resolution of it: the payout to be recorded paid at its net by its
// workflow, the difference left for finance to book by hand (no account of
// the chart holds it).
type RailAmountFlag struct {
	PayoutID     string
	Attempt      int
	Rail         string
	RailAmount   decimal.Decimal
	RailCurrency string
	FlaggedAt    time.Time
	// Set once resolved.
	ResolvedBy, Reason string
	ResolvedAt         *time.Time
}

// Resolved reports whether finance has resolved the flag.
func (f RailAmountFlag) Resolved() bool { return f.ResolvedAt != nil }

// Takes reports whether a rail answering amount in currency is the one
// finance resolved the flag at: the payout's workflow, still watching the
// paid payout for a return, must not flag it again.
func (f RailAmountFlag) Takes(amount decimal.Decimal, currency string) bool {
	return f.Resolved() && f.RailCurrency == currency && f.RailAmount.Equal(amount)
}

// RailAmountDifference says what the rail moved beyond the payout's net
// (negative: less), which nothing posts: finance books it by hand.
func RailAmountDifference(f RailAmountFlag, p Payout) string {
	if f.RailCurrency != p.Currency {
		return fmt.Sprintf("the rail's %s %s is in another currency than the net's %s %s", inCurrency(f.RailAmount, f.RailCurrency),
			f.RailCurrency, inCurrency(p.Net, p.Currency), p.Currency)
	}
	return fmt.Sprintf("difference %s %s", inCurrency(f.RailAmount.Sub(p.Net), p.Currency), p.Currency)
}

// RailAmountResolvedNote is the history note of a payout finance resolved
// paid: who, why, both amounts and the difference nobody posted.
func RailAmountResolvedNote(f RailAmountFlag, p Payout, by, reason string) string {
	return fmt.Sprintf("%s resolved by %s: %s; to be recorded paid by its workflow at its net %s %s, %s paid %s %s under %s; %s not posted: book it by hand",
		FailRailAmountMismatch, by, reason, inCurrency(p.Net, p.Currency), p.Currency, f.Rail,
		inCurrency(f.RailAmount, f.RailCurrency), f.RailCurrency, p.RailRef, RailAmountDifference(f, p))
}

// FormatAmount is d as currency writes it ("320.00 CNY").
func FormatAmount(d decimal.Decimal, currency string) string {
	return inCurrency(d, currency) + " " + currency
}
