package ports

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/money"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// TopUpServer implements payoutv1.TopUpServiceServer: a renter opens only
// its own top-ups.
type TopUpServer struct {
	payoutv1.UnimplementedTopUpServiceServer
	Orders *app.TopUpOrders
}

// CreateTopUp implements TopUpService.
func (s *TopUpServer) CreateTopUp(ctx context.Context, r *payoutv1.CreateTopUpRequest) (*payoutv1.CreateTopUpResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleRenter, r.GetRenterId()); err != nil {
		return nil, err
	}
	t, err := s.Orders.Create(ctx, app.TopUpOrderInput{RenterID: r.GetRenterId(), Rail: r.GetRail(), Amount: r.GetAmount(),
		Currency: r.GetCurrency(), IdempotencyKey: r.GetIdempotencyKey()})
	if err != nil {
		return nil, err
	}
	amount := t.Amount.String()
	if cur, err := money.Lookup(t.Currency); err == nil {
		amount = cur.Format(t.Amount)
	}
	return &payoutv1.CreateTopUpResponse{TopUpId: t.ID, RenterId: t.RenterID, Rail: t.Rail, Amount: amount, Currency: t.Currency,
		PayUrl: t.PayURL, ExpiresAt: timestamppb.New(t.ExpiresAt)}, nil
}
