// Package ports adapts pricing's use cases to gRPC and JetStream.
package ports

import (
	"context"

	"github.com/gpubill/gpubill/pkg/auth"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
)

// Server serves PricingService.
type Server struct {
	pricingv1.UnimplementedPricingServiceServer
	App       *app.App
	Explainer *app.ChargeExplainer
}

// CreateRateCard implements PricingService.
func (s *Server) CreateRateCard(ctx context.Context, r *pricingv1.CreateRateCardRequest) (*pricingv1.CreateRateCardResponse, error) {
	c, err := s.App.CreateRateCard(ctx, cardInput(r))
	if err != nil {
		return nil, err
	}
	return &pricingv1.CreateRateCardResponse{RateCard: rateCardPB(c)}, nil
}

// ListRateCards implements PricingService.
func (s *Server) ListRateCards(ctx context.Context, r *pricingv1.ListRateCardsRequest) (*pricingv1.ListRateCardsResponse, error) {
	cs, next, err := s.App.RateCards(ctx, r.Currency, int(r.PageSize), r.PageToken)
	if err != nil {
		return nil, err
	}
	out := &pricingv1.ListRateCardsResponse{RateCards: make([]*pricingv1.RateCard, 0, len(cs)), NextPageToken: next}
	for _, c := range cs {
		out.RateCards = append(out.RateCards, rateCardPB(c))
	}
	return out, nil
}

// GetRateCard implements PricingService.
func (s *Server) GetRateCard(ctx context.Context, r *pricingv1.GetRateCardRequest) (*pricingv1.GetRateCardResponse, error) {
	c, err := s.App.RateCard(ctx, r.RateCardId)
	if err != nil {
		return nil, err
	}
	return &pricingv1.GetRateCardResponse{RateCard: rateCardPB(c)}, nil
}

// CreateQuote implements PricingService.
func (s *Server) CreateQuote(ctx context.Context, r *pricingv1.CreateQuoteRequest) (*pricingv1.CreateQuoteResponse, error) {
	if r.ProviderId != "" {
		// A quote naming a provider applies that provider's own tax rule
		// selection and answers it: the provider's own data (a renter or
		// another provider read which rule set a named provider is on).
		if err := auth.CheckOwner(ctx, auth.RoleProvider, r.ProviderId); err != nil {
			return nil, err
		}
	}
	q, err := s.App.Quote(ctx, quoteInput(r))
	if err != nil {
		return nil, err
	}
	return quotePB(q), nil
}

// ExplainCharges implements PricingService (internal: the ledger's invoices).
func (s *Server) ExplainCharges(ctx context.Context, r *pricingv1.ExplainChargesRequest) (*pricingv1.ExplainChargesResponse, error) {
	ex, err := s.Explainer.Explain(ctx, r.ChargeIds)
	if err != nil {
		return nil, err
	}
	out := &pricingv1.ExplainChargesResponse{Missing: ex.Missing, Totals: map[string]string{}}
	for cur, t := range ex.Totals {
		out.Totals[cur] = t.String()
	}
	for _, l := range ex.Lines {
		out.Lines = append(out.Lines, &pricingv1.ExplainedLine{Kind: l.Kind, GpuModel: l.GPUModel, Band: l.Band, Tier: l.Tier,
			GpuHours: l.GPUHours.String(), Amount: l.Amount.String(), TierDiscount: l.TierDiscount.String()})
	}
	return out, nil
}
