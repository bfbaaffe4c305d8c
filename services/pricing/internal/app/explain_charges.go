package app

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// ExplainChargeIDsMax bounds one explanation request (the ledger asks in
// pages of this many charges).
const ExplainChargeIDsMax = 1000

// ChargesByIDReader reads rated charges by id (pricing's charges table).
type ChargesByIDReader interface {
	ChargesByID(ctx context.Context, ids []string) ([]domain.StoredCharge, error)
}

// Explanation is what a set of charges consists of.
type Explanation struct {
	Lines   []domain.LineSum
	Missing []string                   // requested ids pricing does not know
	Totals  map[string]decimal.Decimal // currency → sum of rounded amounts
}

// ChargeExplainer explains rated charges to the ledger's invoices: their
// lines summed per kind, GPU model, band and tier, with the tier discounts
// the rate cards gave.
type ChargeExplainer struct {
	Charges ChargesByIDReader
	Book    func(context.Context) (*domain.Book, error)
}

// Explain answers for up to ExplainChargeIDsMax charge ids.
func (e *ChargeExplainer) Explain(ctx context.Context, ids []string) (Explanation, error) {
	if len(ids) > ExplainChargeIDsMax {
		return Explanation{}, apperr.Invalid("charge_ids", "%d ids, at most %d", len(ids), ExplainChargeIDsMax)
	}
	charges, err := e.Charges.ChargesByID(ctx, ids)
	if err != nil {
		return Explanation{}, fmt.Errorf("explain charges: %w", err)
	}
	book, err := e.Book(ctx)
	if err != nil {
		return Explanation{}, err
	}
	found := make(map[string]bool, len(charges))
	out := Explanation{Totals: map[string]decimal.Decimal{}}
	var lines []domain.PricedLine
	for _, c := range charges {
		found[c.ID] = true
		out.Totals[c.Currency] = out.Totals[c.Currency].Add(c.Amount)
		lines = append(lines, c.Lines...)
	}
	for _, id := range ids {
		if !found[id] {
			out.Missing = append(out.Missing, id)
		}
	}
	sort.Strings(out.Missing)
	sums, unknown := domain.SumLines(lines, book.Card)
	if len(unknown) > 0 {
		return Explanation{}, fmt.Errorf("explain charges: volume tiers no rate card defines (%s)", strings.Join(unknown, ", "))
	}
	out.Lines = sums
	return out, nil
}
