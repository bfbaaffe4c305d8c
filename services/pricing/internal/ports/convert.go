package ports

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// cardInput converts the wire request to the domain's input.
func cardInput(r *pricingv1.CreateRateCardRequest) domain.CardInput {
	in := domain.CardInput{ID: r.GetRateCardId(), Currency: r.GetCurrency()}
	if r.EffectiveFrom != nil {
		in.EffectiveFrom = r.EffectiveFrom.AsTime()
	}
	for _, p := range r.GpuPrices {
		in.Prices = append(in.Prices, domain.PriceInput{Model: p.GpuModel, Hourly: p.Hourly, Region: p.Region})
	}
	for _, b := range r.TimeBands {
		in.Bands = append(in.Bands, domain.BandInput{Name: b.Name, Start: b.Start, End: b.End, TimeZone: b.Timezone, Multiplier: b.Multiplier})
	}
	for _, t := range r.VolumeTiers {
		in.Tiers = append(in.Tiers, domain.TierInput{UpToGPUHours: t.UpToGpuHours, Discount: t.Discount})
	}
	if p := r.PueSurcharge; p != nil {
		in.PUE = &domain.PUEInput{Threshold: p.Threshold, PerGPUHour: p.PerGpuHour}
	}
	return in
}

// rateCardPB converts a stored card to the wire.
func rateCardPB(c domain.StoredCard) *pricingv1.RateCard {
	out := &pricingv1.RateCard{RateCardId: c.ID, Currency: c.Currency, EffectiveFrom: timestamppb.New(c.EffectiveFrom),
		CreatedAt: timestamppb.New(c.CreatedAt)}
	for _, p := range c.Body.Prices {
		out.GpuPrices = append(out.GpuPrices, &pricingv1.GpuPrice{GpuModel: p.Model, Hourly: p.Hourly, Region: p.Region})
	}
	for _, b := range c.Body.Bands {
		out.TimeBands = append(out.TimeBands, &pricingv1.TimeBand{Name: b.Name, Start: b.Start, End: b.End, Timezone: b.TimeZone, Multiplier: b.Multiplier})
	}
	for _, t := range c.Body.Tiers {
		out.VolumeTiers = append(out.VolumeTiers, &pricingv1.VolumeTier{UpToGpuHours: t.UpToGPUHours, Discount: t.Discount})
	}
	if p := c.Body.PUE; p != nil {
		out.PueSurcharge = &pricingv1.PueSurcharge{Threshold: p.Threshold, PerGpuHour: p.PerGPUHour}
	}
	return out
}

// quoteInput converts the wire request to the use case's input.
func quoteInput(r *pricingv1.CreateQuoteRequest) app.QuoteInput {
	in := app.QuoteInput{Currency: r.Currency, GPUModel: r.GpuModel, Region: r.Region, GPUCount: r.GpuCount, Hours: r.Hours,
		ProviderTier: r.ProviderTier, TaxProfile: r.TaxProfile, ProviderPUE: r.ProviderPue, Jurisdiction: r.Jurisdiction,
		ProviderID: r.ProviderId}
	if r.StartTime != nil {
		t := r.StartTime.AsTime()
		in.StartTime = &t
	}
	return in
}

// quotePB converts a quote to the wire answer.
func quotePB(q app.QuoteResult) *pricingv1.CreateQuoteResponse {
	out := &pricingv1.CreateQuoteResponse{Currency: q.Currency, RateCardId: q.RateCardID,
		RenterPrice: q.RenterPrice, Commission: q.Commission, CommissionRate: q.CommissionRate,
		TaxWithheld: q.TaxWithheld, ProviderNet: q.ProviderNet,
		CommissionConfigVersion: q.CommissionConfigVersion, TaxRuleSet: q.TaxRuleSet, TaxRuleVersion: q.TaxRuleVersion,
		ProviderTier: q.ProviderTier, ProviderTierSource: q.ProviderTierSource, TaxProfile: q.TaxProfile, Jurisdiction: q.Jurisdiction,
		TaxProfileSource: q.TaxProfileSource}
	for _, l := range q.Lines {
		out.Lines = append(out.Lines, &pricingv1.QuoteLine{Kind: l.Kind, Band: l.Band, GpuHours: l.GPUHours,
			UnitPrice: l.UnitPrice, Multiplier: l.Multiplier, Amount: l.Amount, RateCardId: l.RateCardID})
	}
	return out
}
