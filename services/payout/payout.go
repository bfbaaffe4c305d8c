// Package payout is the payout service, minimal for now (DESIGN §6): payout
// methods and KYC, and one payout per settled provider, cycle and currency,
// created from settlement.settled.* in created or action_required (KYC not
// verified, no payout method, or under the minimum: rolls over). Rails and
// ledger movements for payouts come with the payout issue.
package payout

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// Service is the payout service.
type Service struct {
	d     svc.Deps
	store *adapters.Store
	api   *ports.Server
}

// New migrates payout's schema, ensures its streams and wires the service.
func New(ctx context.Context, d svc.Deps) (*Service, error) {
	if err := pg.Migrate(ctx, d.Pool, adapters.Schema, migrations.For(adapters.Schema)); err != nil {
		return nil, err
	}
	if d.JS != nil {
		if err := natsx.EnsureStreams(ctx, d.JS, natsx.StreamSettlement, natsx.StreamPayout); err != nil {
			return nil, err
		}
	}
	st := &adapters.Store{Pool: d.Pool}
	return &Service{d: d, store: st, api: &ports.Server{Store: st, Clock: d.Clock}}, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return "payout" }

// RegisterGRPC implements svc.Service.
func (s *Service) RegisterGRPC(g *grpc.Server) { payoutv1.RegisterPayoutServiceServer(g, s.api) }

// RegisterGateway implements svc.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return payoutv1.RegisterPayoutServiceHandlerClient(ctx, mux, payoutv1.NewPayoutServiceClient(conn))
}

// Policy implements svc.Service (DESIGN §7): providers see and set up only
// their own (checked in the handlers).
func (s *Service) Policy() auth.Policy {
	const p = "/gpubill.payout.v1.PayoutService/"
	own := []string{auth.RoleProvider, auth.RoleFinance, auth.RoleAdmin}
	return auth.Policy{
		p + "GetPayout":           own,
		p + "ListProviderPayouts": own,
		p + "PutPayoutMethod":     own,
		p + "PutKyc":              own,
	}
}

// Run consumes settlement.settled.* and relays the outbox until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.d.JS == nil {
		<-ctx.Done()
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ports.ConsumeSettled(ctx, s.d.JS, s.store, s.d.Clock, s.d.Log) })
	g.Go(func() error {
		return (&outbox.Relay{Pool: s.d.Pool, JS: s.d.JS, Schema: adapters.Schema, Log: s.d.Log}).Run(ctx)
	})
	return g.Wait()
}
