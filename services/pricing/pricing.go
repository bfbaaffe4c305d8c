// Package pricing is the pricing service: rate cards, rating usage into
// exact charges (cumulative rounding per lease), and quotes. New is its
// composition root.
package pricing

import (
	"context"
	"fmt"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	_ "time/tzdata" // time bands name IANA zones; do not depend on the host's zoneinfo

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/pricing/internal/adapters/taxclient"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/ports"
)

// Name is the service's name and Postgres schema.
const Name = "pricing"

// Service is the pricing service.
type Service struct {
	d       svc.Deps
	app     *app.App
	srv     *ports.Server
	charges *ports.ChargeServer
	ackWait time.Duration
}

var _ svc.Service = (*Service)(nil)

// New migrates pricing's schema, ensures its streams and wires the service.
func New(ctx context.Context, d svc.Deps) (*Service, error) {
	if err := pg.Migrate(ctx, d.Pool, Name, migrations.For(Name)); err != nil {
		return nil, err
	}
	if err := d.Streams.EnsureStreams(ctx, d.JS, d.Log, natsx.StreamUsage, natsx.StreamCharges, natsx.StreamGPUModel,
		natsx.StreamParty); err != nil {
		return nil, err
	}
	if err := (&postgres.GPUModels{Pool: d.Pool}).Seed(ctx, gpucatalog.Seed(), d.Clock.Now()); err != nil {
		return nil, err
	}
	st := postgres.NewStore(d.Pool)
	a := app.New(st, &postgres.GPUModels{Pool: d.Pool}, d.Clock)
	charges := &ports.ChargeServer{Charges: &app.RenterCharges{Charges: &postgres.RenterCharges{Pool: d.Pool}}}
	a.Commission = d.CommissionPolicy()
	a.Tiers = &postgres.ProviderTiers{Pool: d.Pool}
	a.Log = d.Log.With("service", Name)
	if d.Internal != nil {
		a.Splits = taxclient.Client{Tax: taxv1.NewTaxServiceClient(d.Internal)}
	}
	ex := &app.ChargeExplainer{Charges: st, Book: a.Book}
	return &Service{d: d, app: a, srv: &ports.Server{App: a, Explainer: ex}, charges: charges}, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return Name }

// RegisterGRPC implements server.Service.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	pricingv1.RegisterPricingServiceServer(g, s.srv)
	pricingv1.RegisterChargeServiceServer(g, s.charges)
}

// RegisterGateway implements server.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	if err := pricingv1.RegisterPricingServiceHandlerClient(ctx, mux, pricingv1.NewPricingServiceClient(conn)); err != nil {
		return fmt.Errorf("pricing gateway: %w", err)
	}
	if err := pricingv1.RegisterChargeServiceHandlerClient(ctx, mux, pricingv1.NewChargeServiceClient(conn)); err != nil {
		return fmt.Errorf("pricing gateway: %w", err)
	}
	return nil
}

// Policy implements server.Service (DESIGN §7): rate cards are finance's
// (auditors and admins may read them); quotes are open to every role; a
// renter reads its own charges (the handler checks the subject);
// explanations of charges are for the ledger's invoices (internal).
func (s *Service) Policy() auth.Policy {
	return auth.Policy{
		pricingv1.PricingService_CreateRateCard_FullMethodName:   {auth.RoleFinance, auth.RoleAdmin},
		pricingv1.PricingService_ListRateCards_FullMethodName:    {auth.RoleFinance, auth.RoleAdmin, auth.RoleAuditor},
		pricingv1.PricingService_GetRateCard_FullMethodName:      {auth.RoleFinance, auth.RoleAdmin, auth.RoleAuditor},
		pricingv1.PricingService_CreateQuote_FullMethodName:      auth.Any,
		pricingv1.ChargeService_ListRenterCharges_FullMethodName: {auth.RoleFinance, auth.RoleAdmin, auth.RoleAuditor, auth.RoleRenter},
		pricingv1.PricingService_ExplainCharges_FullMethodName:   {auth.RoleService},
	}
}

// Run rates usage.recorded.*, retries usage waiting for a card, keeps the
// read models of the GPU catalogue and of the providers' tiers and relays
// the outbox until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	log := s.d.Log.With("service", Name)
	g, ctx := errgroup.WithContext(ctx)
	relay := &outbox.Relay{Pool: s.d.Pool, JS: s.d.JS, Schema: postgres.Schema, Log: log}
	g.Go(func() error { return relay.Run(ctx) })
	cons := &ports.RatingConsumer{App: s.app, JS: s.d.JS, Log: log, AckWait: s.ackWait, DeadLetters: deadletter.New(s.d.Pool, postgres.Schema, log)}
	g.Go(func() error { return cons.Run(ctx) })
	g.Go(func() error {
		return ports.ConsumeGPUModels(ctx, s.d.JS, s.app, log, deadletter.New(s.d.Pool, postgres.Schema, log))
	})
	tiers := &app.ProviderTiers{Store: (&postgres.ProviderTiers{Pool: s.d.Pool}).PartyStore(), Consumer: ports.PartyConsumerName}
	g.Go(func() error {
		return ports.ConsumeParties(ctx, s.d.JS, log, tiers, deadletter.New(s.d.Pool, postgres.Schema, log))
	})
	retry := &ports.PendingRetrier{App: s.app, Log: log}
	g.Go(func() error { return retry.Run(ctx) })
	return g.Wait()
}

// API is the PricingService implementation, for in-process callers
// (gpubill dev's simulator, tests); it skips the gRPC auth interceptor.
func (s *Service) API() pricingv1.PricingServiceServer { return s.srv }

// SetFailPoint installs a test hook called at named points of the rating
// transaction ("before-apply", "before-commit", "after-commit").
func (s *Service) SetFailPoint(f func(point string) error) { s.app.FailPoint = f }

// SetAckWait sets how long a usage batch fetched by the rating consumer
// stays unacknowledged before JetStream redelivers it (natsx.DefaultAckWait
// unless set; tests that kill a consumer use seconds). Call it before Run:
// the consumer's configuration is written when Run starts it.
func (s *Service) SetAckWait(d time.Duration) { s.ackWait = d }

// SetSplitQuoter replaces the tax service's split behind quotes (tests that
// host pricing without the tax service).
func (s *Service) SetSplitQuoter(q app.SplitQuoter) { s.app.Splits = q }
