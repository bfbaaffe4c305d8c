package ports

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/money"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// ChargeServer serves ChargeService.
type ChargeServer struct {
	pricingv1.UnimplementedChargeServiceServer
	Charges *app.RenterCharges
}

// ListRenterCharges implements ChargeService: a renter reads only its own.
func (s *ChargeServer) ListRenterCharges(ctx context.Context, r *pricingv1.ListRenterChargesRequest) (*pricingv1.ListRenterChargesResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleRenter, r.RenterId); err != nil {
		return nil, err
	}
	cs, next, err := s.Charges.List(ctx, r.RenterId, r.LeaseId, int(r.PageSize), r.PageToken)
	if err != nil {
		return nil, err
	}
	out := &pricingv1.ListRenterChargesResponse{Charges: make([]*pricingv1.RenterCharge, 0, len(cs)), NextPageToken: next}
	for _, c := range cs {
		out.Charges = append(out.Charges, renterChargePB(c))
	}
	return out, nil
}

func renterChargePB(c domain.RenterCharge) *pricingv1.RenterCharge {
	amount := c.Amount.String()
	if cur, err := money.Lookup(c.Currency); err == nil {
		amount = c.Amount.StringFixed(cur.MinorUnits)
	}
	pb := &pricingv1.RenterCharge{ChargeId: c.ChargeID, LeaseId: c.LeaseID, RenterId: c.RenterID, ProviderId: c.ProviderID,
		CycleId: c.CycleID, Currency: c.Currency, Amount: amount, ExactAmount: c.ExactAmount.String(),
		EffectiveAt: timestamppb.New(c.EffectiveAt)}
	for _, l := range c.Lines {
		pb.Lines = append(pb.Lines, &pricingv1.RenterChargeLine{Kind: l.Kind, GpuModel: l.GPUModel, GpuCount: l.GPUCount, Band: l.Band,
			Tier: l.Tier, RateCardId: l.RateCardID, StartTime: timestamppb.New(l.Start), EndTime: timestamppb.New(l.End),
			GpuHours: l.GPUHours, UnitPrice: l.UnitPrice, Multiplier: l.Multiplier, Amount: l.AmountDec})
	}
	return pb
}
