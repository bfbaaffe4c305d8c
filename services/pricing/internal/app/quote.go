package app

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// quoteHoursMax bounds a quote's duration (a month of GPU time).
const quoteHoursMax = 24 * 31

// QuoteInput asks what some GPU time would cost and earn.
type QuoteInput struct {
	Currency, GPUModel, Region string
	GPUCount                   int32
	Hours                      string
	StartTime                  *time.Time
	ProviderTier, TaxProfile   string
	ProviderPUE                string
}

// QuoteLine is one priced part of a quote.
type QuoteLine struct {
	Kind, Band                              string
	GPUHours, UnitPrice, Multiplier, Amount string
}

// QuoteResult is the price and its split, formatted in the currency.
type QuoteResult struct {
	Currency, RateCardID                    string
	Lines                                   []QuoteLine
	RenterPrice, Commission, CommissionRate string
	TaxWithheld, ProviderNet                string
}

// quoteRequest is a validated QuoteInput.
type quoteRequest struct {
	cur     money.Currency
	usage   domain.Usage
	rate    decimal.Decimal // commission rate of the tier
	profile string
}

// Quote is the earnings calculator: it prices the usage with the same code
// as real charges (bands, tiers from an empty month, PUE when given) and
// splits the rounded renter price with the same rules as settlement.
func (a *App) Quote(ctx context.Context, in QuoteInput) (QuoteResult, error) {
	q, err := checkQuote(in)
	if err != nil {
		return QuoteResult{}, err
	}
	book, err := a.Book(ctx)
	if err != nil {
		return QuoteResult{}, err
	}
	card, ok := book.For(q.cur.Code, q.usage.Start)
	if !ok {
		return QuoteResult{}, fmt.Errorf("no rate card in %s effective at %s: %w", q.cur.Code, q.usage.Start.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	if _, ok := card.Price(in.GPUModel, in.Region); !ok {
		return QuoteResult{}, apperr.Invalid("gpu_model", "rate card %s has no price for %s", card.ID, in.GPUModel)
	}
	out := QuoteResult{Currency: q.cur.Code, RateCardID: card.ID}
	total, err := priceQuote(card, q.usage, &out)
	if err != nil {
		return QuoteResult{}, err
	}
	var lt domain.LeaseTotal
	gross := lt.Add(q.cur, total)
	rule, err := split.RuleFor(split.RuleSetDefault)
	if err != nil {
		return QuoteResult{}, err
	}
	res, err := split.Compute(q.cur, gross, q.rate, rule, q.profile)
	if err != nil {
		return QuoteResult{}, err
	}
	out.RenterPrice, out.Commission, out.CommissionRate = q.cur.Format(res.Gross), q.cur.Format(res.Commission), domain.Str(res.CommissionRate)
	out.TaxWithheld, out.ProviderNet = q.cur.Format(res.Tax), q.cur.Format(res.Net)
	return out, nil
}

// checkQuote validates a quote request, naming every bad field.
func checkQuote(in QuoteInput) (quoteRequest, error) {
	v := &apperr.Validator{}
	cur, err := money.Lookup(in.Currency)
	v.Check(err == nil, "currency", "%q is not a supported currency", in.Currency)
	v.Check(in.GPUModel != "", "gpu_model", "required")
	v.Check(in.GPUCount >= 1 && in.GPUCount <= 64, "gpu_count", "%d outside 1..64", in.GPUCount)
	hours, herr := money.ParseDecimal(in.Hours)
	v.Check(herr == nil && hours.IsPositive() && hours.LessThanOrEqual(decimal.NewFromInt(quoteHoursMax)),
		"hours", "%q is not a decimal in (0, %d]", in.Hours, quoteHoursMax)
	v.Check(in.StartTime != nil, "start_time", "required")
	tier := in.ProviderTier
	if tier == "" {
		tier = split.TierStandard
	}
	rate, rerr := split.DefaultCommission().Rate(tier)
	v.Check(rerr == nil, "provider_tier", "%q is not one of standard, pro, partner", in.ProviderTier)
	profile := in.TaxProfile
	if profile == "" {
		profile = split.ProfileIndividual
	}
	v.Check(profile == split.ProfileIndividual || profile == split.ProfileEnterprise, "tax_profile", "%q is not one of individual, enterprise", in.TaxProfile)
	var pue *decimal.Decimal
	if in.ProviderPUE != "" {
		d, err := money.ParseDecimal(in.ProviderPUE)
		v.Check(err == nil && d.GreaterThanOrEqual(decimal.NewFromInt(1)), "provider_pue", "%q is not a decimal >= 1", in.ProviderPUE)
		pue = &d
	}
	if err := v.Err(); err != nil {
		return quoteRequest{}, err
	}
	start := *in.StartTime
	micros := hours.Mul(decimal.NewFromInt(int64(time.Hour / time.Microsecond))).Round(0).IntPart()
	u := domain.Usage{Model: in.GPUModel, Region: in.Region, GPUCount: in.GPUCount, Start: start,
		End: start.Add(time.Duration(micros) * time.Microsecond), PUE: pue}
	return quoteRequest{cur: cur, usage: u, rate: rate, profile: profile}, nil
}

// priceQuote rates the usage from an empty month, adds its lines to out and
// returns the total in price-seconds.
func priceQuote(card *domain.Card, u domain.Usage, out *QuoteResult) (decimal.Decimal, error) {
	pieces, err := card.Rate(u, domain.MonthUsage{}, nil)
	if err != nil {
		return decimal.Zero, err
	}
	total := decimal.Zero
	for _, p := range pieces {
		unit, mult := card.Factors(p, u.Model, u.Region)
		ps := domain.PriceSeconds(p.GPUMicros, unit, mult)
		total = total.Add(ps)
		out.Lines = append(out.Lines, QuoteLine{Kind: p.Kind, Band: card.BandName(p), GPUHours: domain.Str(domain.GPUHours(p.GPUMicros)),
			UnitPrice: domain.Str(unit), Multiplier: domain.Str(mult), Amount: domain.Str(domain.Amount(ps))})
	}
	return total, nil
}
