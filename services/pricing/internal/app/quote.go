package app

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// quoteHoursMax bounds a quote's duration (a month of GPU time).
const quoteHoursMax = 24 * 31

// Quote is the earnings calculator: it prices the usage with the same code
// as real charges (bands, tiers from an empty month, PUE when given) and
// splits the rounded renter price with the same rules as settlement.
func (a *App) Quote(ctx context.Context, r *pricingv1.CreateQuoteRequest, providerPUE string) (*pricingv1.CreateQuoteResponse, error) {
	v := &apperr.Validator{}
	cur, err := money.Lookup(r.Currency)
	v.Check(err == nil, "currency", "%q is not a supported currency", r.Currency)
	v.Check(r.GpuModel != "", "gpu_model", "required")
	v.Check(r.GpuCount >= 1 && r.GpuCount <= 64, "gpu_count", "%d outside 1..64", r.GpuCount)
	hours, herr := money.ParseDecimal(r.Hours)
	v.Check(herr == nil && hours.IsPositive() && hours.LessThanOrEqual(decimal.NewFromInt(quoteHoursMax)),
		"hours", "%q is not a decimal in (0, %d]", r.Hours, quoteHoursMax)
	v.Check(r.StartTime != nil, "start_time", "required")
	tier := r.ProviderTier
	if tier == "" {
		tier = split.TierStandard
	}
	rate, rerr := split.DefaultCommission().Rate(tier)
	v.Check(rerr == nil, "provider_tier", "%q is not one of standard, pro, partner", r.ProviderTier)
	profile := r.TaxProfile
	if profile == "" {
		profile = split.ProfileIndividual
	}
	v.Check(profile == split.ProfileIndividual || profile == split.ProfileEnterprise, "tax_profile", "%q is not one of individual, enterprise", r.TaxProfile)
	var pue *decimal.Decimal
	if providerPUE != "" {
		d, err := money.ParseDecimal(providerPUE)
		v.Check(err == nil && d.GreaterThanOrEqual(decimal.NewFromInt(1)), "provider_pue", "%q is not a decimal >= 1", providerPUE)
		pue = &d
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	start := r.StartTime.AsTime()
	micros := hours.Mul(decimal.NewFromInt(int64(time.Hour / time.Microsecond))).Round(0).IntPart()
	u := domain.Usage{Model: r.GpuModel, Region: r.Region, GPUCount: r.GpuCount, Start: start,
		End: start.Add(time.Duration(micros) * time.Microsecond), PUE: pue}

	book, err := a.Book(ctx)
	if err != nil {
		return nil, err
	}
	card, ok := book.For(cur.Code, start)
	if !ok {
		return nil, fmt.Errorf("no rate card in %s effective at %s: %w", cur.Code, start.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	if _, ok := card.Price(r.GpuModel, r.Region); !ok {
		return nil, apperr.Invalid("gpu_model", "rate card %s has no price for %s", card.ID, r.GpuModel)
	}
	pieces, err := card.Rate(u, domain.MonthUsage{}, nil)
	if err != nil {
		return nil, err
	}
	out := &pricingv1.CreateQuoteResponse{Currency: cur.Code, RateCardId: card.ID}
	total := decimal.Zero
	for _, p := range pieces {
		unit, mult := card.Factors(p, r.GpuModel, r.Region)
		ps := domain.PriceSeconds(p.GPUMicros, unit, mult)
		total = total.Add(ps)
		out.Lines = append(out.Lines, &pricingv1.QuoteLine{Kind: p.Kind, Band: card.BandName(p), GpuHours: Str(domain.GPUHours(p.GPUMicros)),
			UnitPrice: Str(unit), Multiplier: Str(mult), Amount: Str(domain.Amount(ps))})
	}
	var lt domain.LeaseTotal
	gross := lt.Add(cur, total)
	rule, err := split.RuleFor(split.RuleSetDefault)
	if err != nil {
		return nil, err
	}
	res, err := split.Compute(cur, gross, rate, rule, profile)
	if err != nil {
		return nil, err
	}
	out.RenterPrice, out.Commission, out.CommissionRate = cur.Format(res.Gross), cur.Format(res.Commission), Str(res.CommissionRate)
	out.TaxWithheld, out.ProviderNet = cur.Format(res.Tax), cur.Format(res.Net)
	return out, nil
}
