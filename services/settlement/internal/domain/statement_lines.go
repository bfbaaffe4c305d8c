package domain

import (
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// Entry is one posting to a provider's pending account in a currency, with
// what its transaction's metadata says of the usage behind it.
type Entry struct {
	TransactionID, Direction, Amount                   string
	LeaseID, RenterID, GPUModel, GPUHours, Description string
}

// StatementLines are a statement's lines from the postings to the
// provider's pending account in the cycle (Entries), but the settlement's
// own (settlementTx, sweepTx) that empty it: one line per lease, renter and
// GPU model (its charges' amounts and GPU hours summed, in the order the
// lease first earned), one per credit naming no lease, and one per other
// debit, negative (a refund or correction). The lines add up to the gross
// the settlement split.
func StatementLines(es []Entry, cur money.Currency, settlementTx, sweepTx string) ([]Line, error) {
	type usage struct{ lease, renter, gpu string }
	type sum struct {
		amount, hours decimal.Decimal
		charges       int
	}
	var out []Line
	at := map[usage]int{}
	sums := map[usage]*sum{}
	for _, e := range es {
		if e.TransactionID == settlementTx || (sweepTx != "" && e.TransactionID == sweepTx) {
			continue
		}
		amt, err := decimal.NewFromString(e.Amount)
		if err != nil {
			return nil, fmt.Errorf("posting of %s: amount %q: %w", e.TransactionID, e.Amount, err)
		}
		if e.Direction != Credit {
			out = append(out, Line{TransactionID: e.TransactionID, Amount: cur.Format(amt.Neg()), Description: e.Description})
			continue
		}
		if e.LeaseID == "" {
			out = append(out, Line{TransactionID: e.TransactionID, RenterID: e.RenterID, Amount: cur.Format(amt), Description: e.Description})
			continue
		}
		k := usage{e.LeaseID, e.RenterID, e.GPUModel}
		s := sums[k]
		if s == nil {
			s = &sum{}
			sums[k], at[k] = s, len(out)
			out = append(out, Line{LeaseID: e.LeaseID, RenterID: e.RenterID, GPUModel: e.GPUModel})
		}
		s.amount, s.charges = s.amount.Add(amt), s.charges+1
		if h, err := decimal.NewFromString(e.GPUHours); err == nil {
			s.hours = s.hours.Add(h)
		}
	}
	for k, s := range sums {
		l := &out[at[k]]
		l.Amount = cur.Format(s.amount)
		if !s.hours.IsZero() {
			l.GPUHours = s.hours.String()
		}
		l.Description = fmt.Sprintf("%d charges", s.charges)
		if s.charges == 1 {
			l.Description = "1 charge"
		}
	}
	return out, nil
}
