// Package pricingexplainer asks pricing, over its internal API, what the
// ledger's charges consist of (invoicing.Explainer).
package pricingexplainer

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app/invoicing"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Client implements invoicing.Explainer with PricingService.ExplainCharges.
type Client struct {
	Pricing pricingv1.PricingServiceClient
}

var _ invoicing.Explainer = Client{}

// Explain implements invoicing.Explainer.
func (c Client) Explain(ctx context.Context, chargeIDs []string) (invoicing.Explanation, error) {
	resp, err := c.Pricing.ExplainCharges(ctx, &pricingv1.ExplainChargesRequest{ChargeIds: chargeIDs})
	if err != nil {
		return invoicing.Explanation{}, fmt.Errorf("pricing ExplainCharges: %w", err)
	}
	out := invoicing.Explanation{Missing: resp.Missing, Totals: map[string]decimal.Decimal{}}
	for cur, t := range resp.Totals {
		d, err := money.ParseDecimal(t)
		if err != nil {
			return invoicing.Explanation{}, fmt.Errorf("pricing total %s %q: %w", cur, t, err)
		}
		out.Totals[cur] = d
	}
	for _, l := range resp.Lines {
		var v [3]decimal.Decimal
		for i, s := range []string{l.GpuHours, l.Amount, l.TierDiscount} {
			d, err := money.ParseDecimal(s)
			if err != nil {
				return invoicing.Explanation{}, fmt.Errorf("pricing line %s %s: %q: %w", l.Kind, l.GpuModel, s, err)
			}
			v[i] = d
		}
		out.Lines = append(out.Lines, domain.ExplainedLine{Kind: l.Kind, GPUModel: l.GpuModel, Band: l.Band, Tier: l.Tier,
			GPUHours: v[0], Amount: v[1], TierDiscount: v[2]})
	}
	return out, nil
}
