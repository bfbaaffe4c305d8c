// Package settlement is the settlement service (DESIGN §5): 45-day cycles
// closed by Temporal workflows (settle-{cycle}, settle-{cycle}-{provider}),
// the commission split, statements and provider holds. New is its
// composition root; *Service implements pkg/svc.Service and hosts the
// Temporal worker in Run.
package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/log"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters/grpcclients"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// TaskQueueDefault is the Temporal task queue of the settlement worker.
const TaskQueueDefault = "settlement"

// Worker limits: the provider workflows are cheap (one local activity), so
// the worker runs many at once; pollers keep the task queue drained. A
// cycle page starts its provider workflows eagerly (the first workflow task
// comes back in the start response), which needs a free workflow task slot
// per provider in flight: with fewer slots than the page's window the rest
// go through matching (one more server round trip and transition each), so
// the slots exceed WindowMax.
const (
	workflowTaskPollers       = 8
	activityTaskPollers       = 4
	workflowTasksConcurrent   = 1024
	localActivitiesConcurrent = 1024
	activitiesConcurrent      = 32
)

// Option configures the service.
type Option func(*Service)

// WithCommission sets the commission policy (rates per tier within bounds).
func WithCommission(p split.CommissionPolicy) Option { return func(s *Service) { s.commission = p } }

// WithBatchSize sets how many providers a cycle run settles (one page) before
// continuing as new.
func WithBatchSize(n int) Option { return func(s *Service) { s.batch = n } }

// WithWindow sets how many provider workflows a page keeps in flight.
func WithWindow(n int) Option { return func(s *Service) { s.window = n } }

// WithoutStartupCycles skips starting the current and past-due cycles'
// workflows and creating the schedules in Run (tests drive cycles
// themselves).
func WithoutStartupCycles() Option { return func(s *Service) { s.noStartup = true } }

// Service is the settlement service.
type Service struct {
	d          svc.Deps
	tc         client.Client
	queue      string
	commission split.CommissionPolicy
	batch      int
	window     int
	noStartup  bool
	store      *postgres.Store
	acts       *ports.Activities
	api        *ports.Server
}

// New migrates settlement's schema, ensures its streams and wires the service.
// A commission policy outside the platform's bounds is refused.
func New(ctx context.Context, d svc.Deps, tc client.Client, taskQueue string, opts ...Option) (*Service, error) {
	if tc == nil {
		return nil, errors.New("settlement needs a Temporal client")
	}
	if taskQueue == "" {
		taskQueue = TaskQueueDefault
	}
	s := &Service{d: d, tc: tc, queue: taskQueue, commission: d.CommissionPolicy(), batch: app.BatchSizeDefault, window: app.WindowDefault}
	for _, o := range opts {
		o(s)
	}
	if err := s.commission.Validate(); err != nil {
		return nil, fmt.Errorf("settlement commission policy: %w", err)
	}
	if err := pg.Migrate(ctx, d.Pool, postgres.Schema, migrations.For(postgres.Schema)); err != nil {
		return nil, err
	}
	if d.JS != nil {
		if err := d.Streams.EnsureStreams(ctx, d.JS, d.Log, natsx.StreamSettlement, natsx.StreamParty); err != nil {
			return nil, err
		}
	}
	s.store = postgres.NewStore(d.Pool)
	s.acts = &ports.Activities{
		Steps: &app.Steps{
			Store: s.store, Ledger: grpcclients.NewLedger(d.Internal), Tax: grpcclients.NewTax(d.Internal),
			Commission: s.commission, Calendar: d.Calendar, Clock: d.Clock, Log: d.Log,
		},
		Temporal: tc, TaskQueue: taskQueue,
		Page:     &app.PageSettler{States: s.store, Runner: ports.WorkflowRunner{Temporal: tc, TaskQueue: taskQueue}, Clock: clock.System{}, Log: d.Log},
		Calendar: d.Calendar, Clock: d.Clock, Log: d.Log,
		BatchSize: s.batch, Window: s.window,
	}
	s.api = &ports.Server{Store: s.store, Temporal: tc, TaskQueue: taskQueue, Calendar: d.Calendar, Clock: d.Clock, BatchSize: s.batch, Window: s.window}
	return s, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return "settlement" }

// ReadyChecks implements svc.ReadyChecker: run alone, settlement is ready only
// while its Temporal frontend answers.
func (s *Service) ReadyChecks() []server.Check {
	return []server.Check{{Name: "temporal", Check: func(ctx context.Context) error {
		_, err := s.tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}}}
}

// RegisterGRPC implements svc.Service.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	settlementv1.RegisterSettlementServiceServer(g, s.api)
}

// RegisterGateway implements svc.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	return settlementv1.RegisterSettlementServiceHandlerClient(ctx, mux, settlementv1.NewSettlementServiceClient(conn))
}

// Policy implements svc.Service (DESIGN §7).
func (s *Service) Policy() auth.Policy {
	const p = "/gpubill.settlement.v1.SettlementService/"
	finance := []string{auth.RoleFinance, auth.RoleAdmin}
	read := []string{auth.RoleFinance, auth.RoleAuditor, auth.RoleAdmin}
	return auth.Policy{
		p + "ListSettlementCycles": read,
		p + "GetSettlementCycle":   read,
		p + "CloseSettlementCycle": finance,
		p + "HoldProvider":         finance,
		p + "ReleaseProvider":      finance,
		p + "ListStatements":       {auth.RoleProvider, auth.RoleFinance, auth.RoleAuditor, auth.RoleAdmin},
	}
}

// NewWorker returns a settlement worker on the task queue with the workflows
// and activities registered (Run starts one; tests start and stop their own).
func (s *Service) NewWorker() worker.Worker {
	w := worker.New(s.tc, s.queue, WorkerOptions())
	Register(w, s.acts, s.d.TaxPeriods)
	return w
}

// WorkerOptions are the settlement worker's options (pollers and
// concurrency); the ceiling_temporal benchmark runs its workers with them.
func WorkerOptions() worker.Options {
	return worker.Options{
		MaxConcurrentWorkflowTaskPollers:        workflowTaskPollers,
		MaxConcurrentActivityTaskPollers:        activityTaskPollers,
		MaxConcurrentWorkflowTaskExecutionSize:  workflowTasksConcurrent,
		MaxConcurrentLocalActivityExecutionSize: localActivitiesConcurrent,
		MaxConcurrentActivityExecutionSize:      activitiesConcurrent,
	}
}

// Register registers settlement's workflows and activities on a worker (or
// a test environment's registry), each under its name; the remittance
// workflows run on the tax period calendar.
func Register(r interface {
	RegisterWorkflowWithOptions(any, workflow.RegisterOptions)
	RegisterActivityWithOptions(any, activity.RegisterOptions)
}, acts *ports.Activities, taxPeriods taxperiod.Calendar) {
	rem := app.Remittances{Periods: taxPeriods}
	for _, w := range []struct {
		name string
		fn   any
	}{
		{app.CycleWorkflowName, app.CycleWorkflow},
		{app.ProviderWorkflowName, app.ProviderWorkflow},
		{app.CycleOpenerWorkflowName, app.CycleOpenerWorkflow},
		{app.RemittanceMonthlyWorkflowName, rem.MonthlyWorkflow},
		{app.RemittanceWorkflowName, rem.RemitWorkflow},
		{app.InvoicesMonthlyWorkflowName, app.Invoices{Periods: taxPeriods}.MonthlyWorkflow},
		{app.ReconciliationDailyWorkflowName, app.ReconciliationDailyWorkflow},
		{app.CommissionSweepWorkflowName, app.CommissionSweepWorkflow},
	} {
		r.RegisterWorkflowWithOptions(w.fn, workflow.RegisterOptions{Name: w.name})
	}
	for _, a := range []struct {
		name string
		fn   any
	}{
		{app.ActEnsureCycle, acts.EnsureCycle},
		{app.ActStartNextCycle, acts.StartNextCycle},
		{app.ActBeginClose, acts.BeginClose},
		{app.ActSnapshotCycle, acts.SnapshotCycle},
		{app.ActNextProviders, acts.NextProviders},
		{app.ActSettleProviders, acts.SettleProviders},
		{app.ActCompleteCycle, acts.CompleteCycle},
		{app.ActSettleProviderSteps, acts.SettleProvider},
		{app.ActSettleProviderLegacy, acts.SettleProvider},
		{app.ActEnsureCycleWorkflows, acts.EnsureCycleWorkflows},
		{app.ActRemitTax, acts.RemitTax},
		{app.ActIssueInvoices, acts.IssueInvoices},
		{app.ActRunReconciliation, acts.RunReconciliation},
		{app.ActSweepCommission, acts.SweepCommission},
	} {
		r.RegisterActivityWithOptions(a.fn, activity.RegisterOptions{Name: a.name})
	}
}

// StartCycles starts the workflows of the current cycle, the previous one
// (it may still be in its grace period) and any cycle settlement knows that
// is not settled yet; a closing cycle's settlement is run again (its run in
// flight, if any, is asked for another pass). Each start is idempotent. A
// cycle not settled that the configured calendar does not cut fails it.
func (s *Service) StartCycles(ctx context.Context) error {
	cur := s.d.Calendar.At(s.d.Clock.Now())
	prev := s.d.Calendar.At(cur.Start.Add(-1))
	_, err := s.acts.StartCycles(ctx, []cycles.Cycle{cur, prev}, "start-up")
	return err
}

// Run hosts the Temporal worker, the party consumer and the outbox relay
// until ctx ends. At start-up (unless WithoutStartupCycles) it starts the
// cycles' workflows and creates (or updates) the Temporal Schedules: the
// daily cycle opener (settle-{cycle} for the current and the next cycle
// and every cycle not settled), the monthly tax remittance
// (remit-{YYYY-MM}, 02:00 on the 1st in the tax zone), the monthly renter
// invoices (01:00 on the 1st there), the daily bank reconciliation
// (06:00 in the tax zone) and the hourly deferred commission sweep.
func (s *Service) Run(ctx context.Context) error {
	w := s.NewWorker()
	if err := w.Start(); err != nil {
		return fmt.Errorf("start settlement worker: %w", err)
	}
	defer w.Stop()
	if !s.noStartup {
		if err := s.StartCycles(ctx); err != nil {
			return fmt.Errorf("start cycle workflows: %w", err)
		}
		if err := s.ensureSchedules(ctx); err != nil {
			return err
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	if s.d.JS != nil {
		g.Go(func() error { return s.consumeParties(ctx) })
		g.Go(func() error {
			return (&outbox.Relay{Pool: s.d.Pool, JS: s.d.JS, Schema: postgres.Schema, Log: s.d.Log}).Run(ctx)
		})
	}
	g.Go(func() error { <-ctx.Done(); return nil })
	return g.Wait()
}

// ensureSchedules creates or updates the Temporal Schedules at start-up
// (ports.EnsureSchedules), at the service's clock's now.
func (s *Service) ensureSchedules(ctx context.Context) error {
	return ports.EnsureSchedules(ctx, s.tc, s.queue, s.d.TaxPeriods, s.d.Clock.Now())
}

// TemporalInterceptors trace what a Temporal client starts (workflows,
// signals) and what the workers made from it run (workflows, activities)
// with the SDK's OpenTelemetry interceptor, on the global tracer provider
// and propagator (pkg/obs.SetupTracing): the trace context goes in the
// Temporal headers, so a cycle's spans follow the call that closed it.
// Give them to client.Options.Interceptors (they reach its workers too;
// never also to worker.Options, which would trace everything twice).
func TemporalInterceptors() ([]interceptor.ClientInterceptor, error) {
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{i}, nil
}

// TemporalLogger adapts a slog logger for the Temporal client, quietened to
// warnings (the SDK logs every poll at info).
func TemporalLogger(l *slog.Logger) log.Logger {
	return log.NewStructuredLogger(slog.New(warnOnly{l.Handler()}))
}

type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, lvl slog.Level) bool {
	return lvl >= slog.LevelWarn && w.Handler.Enabled(ctx, lvl)
}

// consumeParties keeps the provider tiers from party.updated until ctx ends.
func (s *Service) consumeParties(ctx context.Context) error {
	tiers := &app.ProviderTiers{Store: s.store.PartyStore(), Consumer: ports.PartyConsumerName}
	return ports.ConsumeParties(ctx, s.d.JS, s.d.Log, tiers, deadletter.New(s.d.Pool, postgres.Schema, s.d.Log))
}
