// Package tax is the tax service (DESIGN §5): tax profiles (read model of
// party.updated), a versioned, effective-dated withholding rule table,
// withholdings with certificates, and monthly remittances (calendar months
// in GPUBILL_TAX_TIMEZONE, default Asia/Shanghai). New is its
// composition root; *Service implements pkg/svc.Service.
package tax

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
	"github.com/gpubill/gpubill/services/tax/internal/adapters/ledgerclient"
	"github.com/gpubill/gpubill/services/tax/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/ports"
)

// Service is the tax service.
type Service struct {
	d     svc.Deps
	store *postgres.Store
	app   *app.App
	api   *ports.Server
}

// New migrates the tax schema (seeding the flat20 and cn_labour rules),
// ensures the streams it reads and wires the service.
func New(ctx context.Context, d svc.Deps) (*Service, error) {
	if err := pg.Migrate(ctx, d.Pool, postgres.Schema, migrations.For(postgres.Schema)); err != nil {
		return nil, err
	}
	if d.JS != nil {
		if err := d.Streams.EnsureStreams(ctx, d.JS, d.Log, natsx.StreamParty); err != nil {
			return nil, err
		}
	}
	st := postgres.NewStore(d.Pool)
	a := &app.App{Log: d.Log, Store: st, Ledger: ledgerclient.Ledger{Client: ledgerv1.NewLedgerServiceClient(d.Internal)}, Clock: d.Clock, Calendar: d.Calendar, TaxPeriods: d.TaxPeriods}
	return &Service{d: d, store: st, app: a, api: &ports.Server{App: a}}, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return "tax" }

// RegisterGRPC implements svc.Service.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) { taxv1.RegisterTaxServiceServer(g, s.api) }

// RegisterGateway implements svc.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	return taxv1.RegisterTaxServiceHandlerClient(ctx, mux, taxv1.NewTaxServiceClient(conn))
}

// Policy implements svc.Service (DESIGN §7): providers see only their own
// withholdings (checked in the handlers).
func (s *Service) Policy() auth.Policy {
	const p = "/gpubill.tax.v1.TaxService/"
	own := []string{auth.RoleProvider, auth.RoleFinance, auth.RoleAuditor, auth.RoleAdmin}
	read := []string{auth.RoleFinance, auth.RoleAuditor, auth.RoleAdmin}
	finance := []string{auth.RoleFinance, auth.RoleAdmin}
	return auth.Policy{
		p + "ListTaxWithholdings":       own,
		p + "GetWithholdingCertificate": own,
		p + "ComputeWithholding":        {auth.RoleService}, // internal: settlement's activities
		p + "QuoteWithholding":          {auth.RoleService}, // internal: pricing's quotes
		p + "ListTaxRules":              auth.Any,
		p + "SetRuleSelection":          finance,
		p + "RemitTax":                  {auth.RoleFinance, auth.RoleAdmin, auth.RoleService}, // service: the monthly schedule
		p + "ListRemittances":           read,
		p + "ListRemittanceLines":       read,
	}
}

// Run checks the remittances for reversals (every app.RemitReversedEvery),
// keeps the tax profiles and relays the outbox until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.runRemitReversed(ctx) })
	if s.d.JS == nil {
		return g.Wait()
	}
	g.Go(func() error {
		profiles := &app.ProviderProfiles{Store: s.store.PartyStore(), Consumer: ports.PartyConsumerName}
		return ports.ConsumeParties(ctx, s.d.JS, s.d.Log, profiles, deadletter.New(s.d.Pool, postgres.Schema, s.d.Log))
	})
	g.Go(func() error {
		return (&outbox.Relay{Pool: s.d.Pool, JS: s.d.JS, Schema: postgres.Schema, Log: s.d.Log}).Run(ctx)
	})
	return g.Wait()
}

// reversalCheckFailures counts failed reversal checks: logged only, a
// ledger unreachable found no reversal, and the reversed remittances'
// gauges stayed at 0 with nobody told.
var reversalCheckFailures = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_tax_reversal_check_failures_total",
	Help: "Reversed-remittance checks (every 10 minutes) that failed (the tax service's log says why); a remittance reversed in the ledger is not found until one succeeds.",
})

// runRemitReversed runs app.RemitReversed now and every
// app.RemitReversedEvery: a remittance reversed in the ledger is marked and
// its tax remitted again within it (GpubillTaxRemittanceReversed past an
// hour: its new remittance refused, or not planned; a failing check is
// counted, GpubillTaxReversalCheckFailing).
func (s *Service) runRemitReversed(ctx context.Context) error {
	return svc.Every(ctx, app.RemitReversedEvery, func() {
		if _, err := s.app.RemitReversed(ctx); err != nil && ctx.Err() == nil {
			reversalCheckFailures.Inc()
			s.d.Log.Error("tax remittances: reversal check", "err", err)
		}
	})
}
