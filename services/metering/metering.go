// Package metering is the metering service: the owner of parties (providers
// and renters) and of GPU usage. New is its composition root.
package metering

import (
	"context"
	"fmt"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
	"github.com/gpubill/gpubill/services/metering/internal/ports"
)

// Name is the service's name and Postgres schema.
const Name = "metering"

// Option adjusts the service.
type Option func(*Service)

// WithLateArrival sets how old a usage's start may be (default 35 days).
func WithLateArrival(d time.Duration) Option { return func(s *Service) { s.app.LateArrival = d } }

// Service is the metering service.
type Service struct {
	d     svc.Deps
	app   *app.App
	party *ports.PartyServer
	usage *ports.UsageServer
	gpus  *ports.GPUModelServer
}

var _ svc.Service = (*Service)(nil)

// New migrates metering's schema, ensures its streams and wires the service.
func New(ctx context.Context, d svc.Deps, opts ...Option) (*Service, error) {
	if err := pg.Migrate(ctx, d.Pool, Name, migrations.For(Name)); err != nil {
		return nil, err
	}
	if err := d.Streams.EnsureStreams(ctx, d.JS, d.Log, natsx.StreamUsage, natsx.StreamParty, natsx.StreamGPUModel); err != nil {
		return nil, err
	}
	a := app.New(postgres.NewStore(d.Pool), d.Clock, d.Calendar)
	cat := &app.Catalogue{Store: &postgres.Catalogue{Pool: d.Pool}, Clock: d.Clock}
	if err := cat.Seed(ctx); err != nil {
		return nil, err
	}
	if d.LateArrival > 0 {
		a.LateArrival = d.LateArrival
	}
	s := &Service{d: d, app: a, party: &ports.PartyServer{App: a}, usage: &ports.UsageServer{App: a},
		gpus: &ports.GPUModelServer{Catalogue: cat}}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return Name }

// RegisterGRPC implements server.Service.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	meteringv1.RegisterPartyServiceServer(g, s.party)
	meteringv1.RegisterUsageServiceServer(g, s.usage)
	meteringv1.RegisterGpuModelServiceServer(g, s.gpus)
}

// RegisterGateway implements server.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	if err := meteringv1.RegisterPartyServiceHandlerClient(ctx, mux, meteringv1.NewPartyServiceClient(conn)); err != nil {
		return fmt.Errorf("metering gateway: %w", err)
	}
	if err := meteringv1.RegisterUsageServiceHandlerClient(ctx, mux, meteringv1.NewUsageServiceClient(conn)); err != nil {
		return fmt.Errorf("metering gateway: %w", err)
	}
	if err := meteringv1.RegisterGpuModelServiceHandlerClient(ctx, mux, meteringv1.NewGpuModelServiceClient(conn)); err != nil {
		return fmt.Errorf("metering gateway: %w", err)
	}
	return nil
}

// Policy implements server.Service (DESIGN §7). Providers and renters may
// read their own record and usage; the handlers check the subject. Every
// role reads the GPU catalogue; only admins write it.
func (s *Service) Policy() auth.Policy {
	staff := []string{auth.RoleAdmin, auth.RoleFinance}
	return auth.Policy{
		meteringv1.PartyService_CreateProvider_FullMethodName:    staff,
		meteringv1.PartyService_GetProvider_FullMethodName:       {auth.RoleAdmin, auth.RoleFinance, auth.RoleAuditor, auth.RoleProvider},
		meteringv1.PartyService_UpdateProvider_FullMethodName:    staff,
		meteringv1.PartyService_ListProviders_FullMethodName:     {auth.RoleAdmin, auth.RoleFinance, auth.RoleAuditor},
		meteringv1.PartyService_CreateRenter_FullMethodName:      staff,
		meteringv1.PartyService_UpdateRenter_FullMethodName:      staff,
		meteringv1.PartyService_GetRenter_FullMethodName:         {auth.RoleAdmin, auth.RoleFinance, auth.RoleAuditor, auth.RoleRenter},
		meteringv1.PartyService_ListRenters_FullMethodName:       {auth.RoleAdmin, auth.RoleFinance, auth.RoleAuditor},
		meteringv1.UsageService_IngestUsageEvents_FullMethodName: {auth.RoleMeter, auth.RoleFinance, auth.RoleAdmin},
		meteringv1.UsageService_ListUsageEvents_FullMethodName: {auth.RoleAdmin, auth.RoleFinance, auth.RoleAuditor,
			auth.RoleProvider, auth.RoleRenter},
		meteringv1.GpuModelService_ListGpuModels_FullMethodName:  auth.Any,
		meteringv1.GpuModelService_CreateGpuModel_FullMethodName: {auth.RoleAdmin},
	}
}

// Run relays the outbox and consumes usage.ingest.* until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	relay := &outbox.Relay{Pool: s.d.Pool, JS: s.d.JS, Schema: postgres.Schema, Log: s.d.Log.With("service", Name)}
	g.Go(func() error { return relay.Run(ctx) })
	log := s.d.Log.With("service", Name)
	cons := &ports.IngestConsumer{App: s.app, JS: s.d.JS, Log: log, DeadLetters: deadletter.New(s.d.Pool, postgres.Schema, log)}
	g.Go(func() error { return cons.Run(ctx) })
	return g.Wait()
}

// Ingest records a batch of usage events through the same use case as the
// API (for the single binary's simulator and benchmarks). It returns the
// accepted and duplicate counts and the rejections' reasons by index.
func (s *Service) Ingest(ctx context.Context, req *meteringv1.IngestUsageEventsRequest) (*meteringv1.IngestUsageEventsResponse, error) {
	res, err := s.app.Ingest(ctx, ports.EventInputs(req.Events), app.IngestOptions{})
	if err != nil {
		return nil, err
	}
	return ports.IngestResponse(res), nil
}

// Parties is the PartyService implementation, for in-process callers
// (gpubill dev's simulator, tests); it skips the gRPC auth interceptor.
func (s *Service) Parties() meteringv1.PartyServiceServer { return s.party }

// Usage is the UsageService implementation, for in-process callers.
func (s *Service) Usage() meteringv1.UsageServiceServer { return s.usage }

// BatchEventsMax is the most events one ingest call takes.
const BatchEventsMax = domain.BatchEventsMax
