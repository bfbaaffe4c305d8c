// Package ledger is the ledger service's composition root: the double-entry
// journal (DESIGN §4), its finance API (§7), the charges.rated consumer, the
// outbox relay, the hash-chain worker and the segregated-fund report (§8).
package ledger

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/invoicepdf"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/invoicestore"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/pricingexplainer"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/app/invoicing"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

// Service is the ledger, hosted by cmd/ledger or `gpubill dev`.
type Service struct {
	deps       svc.Deps
	app        *app.App
	statements *app.Statements
	reports    *app.Reports
	lease      *app.LeaseControl
	lcfg       LeaseControlConfig
	invoicing  *invoicing.Invoicing
	recons     *app.Reconciliations
	written    *postgres.Written // what the store committed, for the chain worker
	inboxDir   string            // the bank statement inbox (statement_inbox.go)
}

// Option adjusts the service.
type Option func(*Service)

// WithLeaseControl configures lease control (the runway warning and the
// scheduler's webhook); without it, the defaults and events only.
func WithLeaseControl(c LeaseControlConfig) Option { return func(s *Service) { s.lcfg = c } }

var _ svc.Service = (*Service)(nil)

// New migrates the ledger schema, ensures its streams and wires the service.
func New(ctx context.Context, d svc.Deps, opts ...Option) (*Service, error) {
	if d.Pool == nil {
		return nil, errors.New("ledger: no database pool")
	}
	if err := pg.Migrate(ctx, d.Pool, postgres.Schema, migrations.For("ledger")); err != nil {
		return nil, err
	}
	if d.JS != nil {
		if err := d.Streams.EnsureStreams(ctx, d.JS, d.Log, natsx.StreamCharges, natsx.StreamLedger, natsx.StreamBilling, natsx.StreamSettlement, natsx.StreamAudit,
			natsx.StreamParty, natsx.StreamLease); err != nil {
			return nil, err
		}
	}
	groupTimeout, err := groupCommitTimeoutFromEnv()
	if err != nil {
		return nil, err
	}
	store := postgres.NewStore(d.Pool)
	a := app.New(store, d.Clock, d.Calendar, d.Log)
	a.GroupTimeout = groupTimeout
	d.Log, d.Clock = a.Log, a.Clock
	now := func() time.Time { return a.Clock.Now().UTC() }
	reports := newReports(d.Pool, now)
	if err := reports.Store.BackfillBreaches(ctx); err != nil {
		return nil, err
	}
	s := &Service{deps: d, app: a, written: store.Written,
		statements: &app.Statements{Store: &postgres.Statements{Pool: d.Pool}, Now: now},
		reports:    reports,
		recons: &app.Reconciliations{Store: reconStore{&postgres.Reconciliations{Pool: d.Pool}},
			Resolutions: &postgres.Reconciliations{Pool: d.Pool}, Now: now},
		invoicing: &invoicing.Invoicing{
			Repo: &invoicestore.Store{Pool: d.Pool}, PDF: invoicepdf.Renderer{}, Clock: d.Clock, Periods: d.TaxPeriods,
			NewID: func() string { return ids.New("inv") },
		},
	}
	if d.Internal != nil {
		s.invoicing.Explainer = pricingexplainer.Client{Pricing: pricingv1.NewPricingServiceClient(d.Internal)}
	}
	s.inboxDir = os.Getenv(statementInboxEnv)
	for _, o := range opts {
		o(s)
	}
	if err := s.lcfg.Check(); err != nil {
		return nil, err
	}
	if err := checkStatementInbox(s.inboxDir); err != nil {
		return nil, err
	}
	epoch, err := pg.RestoreEpoch(ctx, d.Pool, postgres.Schema)
	if err != nil {
		return nil, err
	}
	s.lease = &app.LeaseControl{Clock: d.Clock, Warn: s.lcfg.RunwayWarn, Log: d.Log.With("component", "lease-control"),
		Wallets: &postgres.Wallets{Pool: d.Pool}, Store: postgres.LeaseStore{Pool: d.Pool, Webhooks: s.lcfg.URL != ""}, Epoch: epoch}
	return s, nil
}

// reconStore hands app the adapter's run transaction as app.ReconRunTx.
type reconStore struct{ *postgres.Reconciliations }

func (s reconStore) BeginRun(ctx context.Context, currency string) (app.ReconRunTx, error) {
	tx, err := s.Reconciliations.BeginRun(ctx, currency)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return "ledger" }

// RegisterGRPC implements svc.Service.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	ledgerv1.RegisterLedgerServiceServer(g, &ports.LedgerServer{App: s.app})
	ledgerv1.RegisterReportServiceServer(g, &ports.ReportServer{Reports: s.reports})
	ledgerv1.RegisterBankStatementServiceServer(g, &ports.BankStatementServer{Statements: s.statements})
	ledgerv1.RegisterReconciliationServiceServer(g, &ports.ReconciliationServer{Reconciliations: s.recons})
	ledgerv1.RegisterAuditServiceServer(g, &ports.AuditServer{App: s.app})
	ledgerv1.RegisterWalletServiceServer(g, &ports.WalletServer{LeaseControl: s.lease})
	ledgerv1.RegisterInvoiceServiceServer(g, &ports.InvoiceServer{Invoicing: s.invoicing})
}

// RegisterGateway implements svc.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	if err := ledgerv1.RegisterLedgerServiceHandlerClient(ctx, mux, ledgerv1.NewLedgerServiceClient(conn)); err != nil {
		return err
	}
	if err := ledgerv1.RegisterReportServiceHandlerClient(ctx, mux, ledgerv1.NewReportServiceClient(conn)); err != nil {
		return err
	}
	if err := ledgerv1.RegisterBankStatementServiceHandlerClient(ctx, mux, ledgerv1.NewBankStatementServiceClient(conn)); err != nil {
		return err
	}
	if err := ledgerv1.RegisterReconciliationServiceHandlerClient(ctx, mux, ledgerv1.NewReconciliationServiceClient(conn)); err != nil {
		return err
	}
	if err := ledgerv1.RegisterWalletServiceHandlerClient(ctx, mux, ledgerv1.NewWalletServiceClient(conn)); err != nil {
		return err
	}
	if err := ledgerv1.RegisterInvoiceServiceHandlerClient(ctx, mux, ledgerv1.NewInvoiceServiceClient(conn)); err != nil {
		return err
	}
	return ledgerv1.RegisterAuditServiceHandlerClient(ctx, mux, ledgerv1.NewAuditServiceClient(conn))
}

// Policy implements svc.Service (DESIGN §7). Providers and renters read
// only their own accounts and the transactions that move them, of those
// only their own postings (checked in the handlers); service is the stack's internal identity (settlement posts
// and closes cycles, tax remits), the only one the internal RPCs accept.
func (s *Service) Policy() auth.Policy {
	const ls, rs, as = "/gpubill.ledger.v1.LedgerService/", "/gpubill.ledger.v1.ReportService/", "/gpubill.ledger.v1.AuditService/"
	const bs = "/gpubill.ledger.v1.BankStatementService/"
	const ws = "/gpubill.ledger.v1.WalletService/"
	const is = "/gpubill.ledger.v1.InvoiceService/"
	const rc = "/gpubill.ledger.v1.ReconciliationService/"
	write := []string{auth.RoleFinance, auth.RoleAdmin}
	read := []string{auth.RoleFinance, auth.RoleAuditor, auth.RoleAdmin}
	own := slices.Concat(read, []string{auth.RoleProvider, auth.RoleRenter})
	internal := []string{auth.RoleService}
	return auth.Policy{
		ls + "CreateDeposit":            slices.Concat(write, internal), // payout deposits the rails' verified top-ups
		ls + "ListAccounts":             own,
		ls + "GetAccount":               slices.Concat(own, internal), // payout reads provider available at its gate
		ls + "ListTransactions":         slices.Concat(own, internal),
		ls + "GetTransaction":           slices.Concat(own, internal), // payout reads the entry a payout settled outside names
		ls + "CreateTransaction":        slices.Concat(write, internal),
		ls + "ReverseTransaction":       write,
		ls + "ListCycleBalances":        internal,
		ls + "CloseLedgerCycle":         internal,
		ls + "ListStatementLines":       internal,
		rs + "GetSegregatedFundsReport": {auth.RoleFinance, auth.RoleAuditor}, // DESIGN §7: the report's readers
		as + "ListAuditEvents":          {auth.RoleFinance, auth.RoleAuditor},
		bs + "ImportBankStatement":      {auth.RoleFinance},
		bs + "ListBankStatements":       {auth.RoleFinance, auth.RoleAuditor},
		ws + "GetRenterWallet":          slices.Concat(read, []string{auth.RoleRenter}),
		is + "ListRenterInvoices":       slices.Concat(read, []string{auth.RoleRenter}),
		is + "GetInvoice":               slices.Concat(read, []string{auth.RoleRenter}),
		is + "IssueInvoices":            internal,
		// The daily schedule runs it as the stack's service identity.
		rc + "RunReconciliation":                 {auth.RoleFinance, auth.RoleService},
		rc + "ListReconciliations":               {auth.RoleFinance, auth.RoleAuditor},
		rc + "GetReconciliation":                 {auth.RoleFinance, auth.RoleAuditor},
		rc + "ListReconciliationItems":           {auth.RoleFinance, auth.RoleAuditor},
		rc + "ListReconciliationStatementBreaks": {auth.RoleFinance, auth.RoleAuditor},
		rc + "ListReconciliationCashDifferences": {auth.RoleFinance, auth.RoleAuditor},
		rc + "ListReconciliationResolutions":     {auth.RoleFinance, auth.RoleAuditor},
		rc + "ListReconciliationResolutionItems": {auth.RoleFinance, auth.RoleAuditor},
		rc + "ResolveReconciliationItems":        {auth.RoleFinance},
		rc + "VoidReconciliationResolution":      {auth.RoleFinance},
	}
}

// Run consumes charges, relays the outbox, extends the hash chain and reads
// the bank statement inbox (GPUBILL_BANK_STATEMENT_INBOX_DIR) until
// ctx ends.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if s.deps.JS != nil {
		g.Go(func() error {
			return ports.ConsumeCharges(ctx, s.deps.JS, s.deps.Log, s.app, deadletter.New(s.deps.Pool, postgres.Schema, s.deps.Log))
		})
		g.Go(func() error {
			return ports.ConsumeAudit(ctx, s.deps.JS, s.deps.Log, s.app, deadletter.New(s.deps.Pool, postgres.Schema, s.deps.Log))
		})
		relay := &outbox.Relay{Pool: s.deps.Pool, JS: s.deps.JS, Schema: postgres.Schema, Log: s.deps.Log}
		g.Go(func() error { return relay.Run(ctx) })
		g.Go(func() error {
			renters := &app.Renters{Store: postgres.RenterStore(s.deps.Pool, s.lease, s.lcfg.URL != ""), Consumer: app.RentersConsumer}
			return ports.ConsumeRenters(ctx, s.deps.JS, s.deps.Log, renters, deadletter.New(s.deps.Pool, postgres.Schema, s.deps.Log))
		})
		g.Go(func() error {
			return ports.ConsumeLeaseControl(ctx, s.deps.JS, s.deps.Log, s.lease, deadletter.New(s.deps.Pool, postgres.Schema, s.deps.Log))
		})
		g.Go(func() error { return s.runLeaseSweep(ctx) })
	}
	if s.lcfg.URL != "" {
		hooks := &ports.LeaseWebhookDeliverer{Queue: &postgres.LeaseWebhooks{Pool: s.deps.Pool}, URL: s.lcfg.URL,
			Secret: []byte(s.lcfg.Secret), Clock: s.deps.Clock, Log: s.lease.Log}
		g.Go(func() error { return hooks.Run(ctx) })
	}
	g.Go(func() error {
		return app.ChainWorker{Chain: postgres.Chain{Pool: s.deps.Pool, Written: s.written}, Log: s.deps.Log}.Run(ctx)
	})
	g.Go(func() error { return s.runCheckpoints(ctx) })
	g.Go(func() error { return s.runSegregatedFunds(ctx) })
	g.Go(func() error { return s.runBurnPrune(ctx) })
	if s.inboxDir != "" {
		g.Go(func() error { return s.statementInbox().Run(ctx) })
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// segregatedFundsEvery is how often the ledger computes the segregated-funds
// report of now for every currency, so /metrics always has a recent verdict
// (gpubill_segregated_funds_verdict, _difference).
const segregatedFundsEvery = 10 * time.Minute

func (s *Service) runSegregatedFunds(ctx context.Context) error {
	return svc.Every(ctx, segregatedFundsEvery, func() { s.reportSegregatedFunds(ctx) })
}

// reportSegregatedFunds computes the report of now of every currency.
func (s *Service) reportSegregatedFunds(ctx context.Context) {
	for _, c := range money.Codes() {
		if _, err := s.reports.SegregatedFunds(ctx, nil, c); err != nil && ctx.Err() == nil {
			app.SegregatedFundsFailed(c)
			s.deps.Log.Error("segregated-funds report for /metrics", "currency", c, "err", err)
		}
	}
}

// burnPruneEvery is how often the ledger deletes the wallet_burn minutes no
// burn rate reads any more (postgres.PruneBurn).
const burnPruneEvery = 10 * time.Minute

// leaseSweepEvery is how often lease control evaluates again the wallets a
// lost message left where they were (app.LeaseControl.Sweep).
const leaseSweepEvery = time.Minute

// runLeaseSweep evaluates every minute the stopped wallets with money to
// spend and the charged ones with nothing left that are not stopped, so a
// top-up or a charge whose ledger.posted.renter message the stream
// discarded still lifts or asks the stop.
func (s *Service) runLeaseSweep(ctx context.Context) error {
	return svc.Every(ctx, leaseSweepEvery, func() {
		if err := s.lease.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.deps.Log.Error("lease control sweep", "err", err)
		}
	})
}

func (s *Service) runBurnPrune(ctx context.Context) error {
	return svc.Every(ctx, burnPruneEvery, func() {
		if _, err := postgres.PruneBurn(ctx, s.deps.Pool, s.deps.Clock.Now()); err != nil && ctx.Err() == nil {
			s.deps.Log.Error("wallet burn minutes", "err", err)
		}
	})
}

// Metrics implements svc.MetricsSource: the invoice months are those of
// the configured tax zone.
func (s *Service) Metrics() []obs.SQLMetric { return metricsIn(s.deps.TaxPeriods) }

// Metrics are the ledger's metrics read on scrape (invoice months in the
// default tax zone): the latest bank reconciliation of each currency (the
// settlement schedule runs one daily), the months whose invoices were not
// issued.
func Metrics() []obs.SQLMetric { return metricsIn(taxperiod.Default()) }

func metricsIn(taxPeriods taxperiod.Calendar) []obs.SQLMetric {
	return append([]obs.SQLMetric{{
		// First: a page reads it, and a scrape's reads are bounded in all
		// (obs.SQLCollector; those past the bound vanish from the scrape).
		//
		// A transaction sorting before the head and not chained never will
		// be (ledger verify names them; only it looked). The latest
		// unchainableProbe transactions by id (UUIDv7: time) are checked:
		// in a journal moved into a cluster whose transaction ids are behind
		// its own, every new one is.
		Name: "gpubill_ledger_unchainable_transactions", Type: obs.Gauge,
		Help: "Of the latest " + unchainableProbe + " journal transactions, those sorting before the hash chain's head (older transaction ids) and not chained: they never will be (the database was moved into a cluster whose transaction ids are behind the journal's; gpubill restore advances them).",
		Query: `select count(*)::float8 from (select id, xid from ledger.transactions order by id desc limit ` + unchainableProbe + `) t,
			(select xid, tx_id from ledger.journal_chain order by position desc limit 1) h
			where (t.xid, t.id) < (h.xid, h.tx_id) and not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`,
	}, auditChainMetric(), {
		Name: "gpubill_reconciliation_exceptions", Type: obs.Gauge, Labels: []string{"currency"},
		Help:  "1 when the latest bank reconciliation of the currency found exceptions (unmatched bank lines, ledger movements unmatched and not outstanding, statements that do not follow on from the account's previous one, a statement's closing balance that bank:client and the items in transit do not explain), 0 when it reconciled.",
		Query: `select distinct on (currency) currency, (verdict = 'exceptions')::int::float8 from ledger.reconciliations order by currency, seq desc`,
	}, {
		Name: "gpubill_reconciliation_unmatched", Type: obs.Gauge, Labels: []string{"currency", "side"},
		Help: "Unmatched items of the latest bank reconciliation of the currency, by side: bank (lines), ledger (movements, exceptions), outstanding (ledger movements the bank may not have booked yet), cash (statement closes at which bank:client plus the items in transit is not the bank's balance: a proof of cash that does not hold).",
		Query: `select currency, side, n::float8 from (select distinct on (currency) currency, unmatched_bank_count,
				unmatched_ledger_count - outstanding_ledger_count as ledger_exceptions, outstanding_ledger_count, cash_difference_count
			from ledger.reconciliations order by currency, seq desc) r
			cross join lateral (values ('bank', r.unmatched_bank_count), ('ledger', r.ledger_exceptions),
				('outstanding', r.outstanding_ledger_count), ('cash', r.cash_difference_count)) v(side, n)`,
	}, {
		// A currency whose runs failed from its first statement had no
		// series, and GpubillReconciliationNotRun read nothing: the daily
		// run has been due since that statement's import.
		Name: "gpubill_reconciliation_last_run_timestamp_seconds", Type: obs.Gauge, Labels: []string{"currency"},
		Help: "When the latest bank reconciliation of the currency ran; for a currency never reconciled, when its first bank statement " +
			"was imported (a run has been due since).",
		Query: `select currency, extract(epoch from coalesce(r.last_run, s.first_import))::float8
			from (select currency, max(created_at) as last_run from ledger.reconciliations group by currency) r
			full join (select currency, min(imported_at) as first_import from ledger.bank_statements group by currency) s using (currency)`,
	}, {
		// The daily run expects the statement of two days back: a feed that
		// stopped leaves runs reconciling against an ever older close (its
		// movements turn into exceptions only 6 days after they were
		// recorded); this says so within a day. Per account: by the newest
		// close of the currency, an account whose feed stopped looked fresh
		// while another account in its currency kept going.
		Name: "gpubill_reconciliation_latest_statement_age_seconds", Type: obs.Gauge, Labels: []string{"currency", "account"},
		Help:  "Time since the close of the account's latest imported bank statement; the daily reconciliation expects the statement of two days back.",
		Query: `select currency, account, extract(epoch from now() - max(closing_at))::float8 from ledger.bank_statements group by currency, account`,
	}, {
		// What GpubillBankStatementStale reads: banks issue no statements
		// at weekends, and by calendar days Friday's statement passed the
		// alert's 3 days every week before Monday's came.
		Name: "gpubill_reconciliation_latest_statement_age_business_days", Type: obs.Gauge, Labels: []string{"currency", "account"},
		Help: "Business days (Monday to Friday, UTC; fractional) since the close of the account's latest imported bank statement; the daily reconciliation expects the statement of two days back.",
		Query: `with latest as (select currency, account, max(closing_at) as closing_at from ledger.bank_statements group by currency, account)
			select currency, account, ` + businessDaysSQL("latest.closing_at", "now()") + ` from latest`,
	}, {
		// The transactions after the chain's head, by transactions_xid_idx:
		// those the chain worker has still to hash (a few, normally).
		Name: "gpubill_ledger_chain_lag_seconds", Type: obs.Gauge,
		Help: "Age of the oldest journal transaction not yet in the hash chain (0: none): the chain worker stalled or failing when it grows.",
		Query: `select coalesce(extract(epoch from now() - min(t.created_at)), 0)::float8 from ledger.transactions t
			where (t.xid, t.id) > (coalesce((select xid from ledger.journal_chain order by position desc limit 1), '0'::xid8),
				coalesce((select tx_id from ledger.journal_chain order by position desc limit 1), '00000000-0000-0000-0000-000000000000'::uuid))`,
	}, closedRenterWalletsMetric()}, invoiceMetrics(taxPeriods)...)
}

// closedRenterWalletsMetric is gpubill_ledger_closed_renter_wallets. A
// closed renter's wallet is left at 0 (its balance refunded, its debt
// written off), and no entry but a reversal or a write-off credits it
// (checkClosedCredits); a reversal restores the state before its entry,
// so the reversal of a refund the bank returned leaves money in a wallet
// nobody spends or claims, and a debt not written off stays on it. One
// query per scrape, one index probe per closed renter: the closed renters
// by renters_closed_idx (migration ledger/0039, an index-only scan), each
// wallet's balances by their key (the wallet's address, ids.RenterWallet's,
// in the balances' collation). The lateral read is kept apart (offset 0):
// joined plainly, the planner hashed the whole of balances (200 000
// wallets, 4 000 closed renters: ~2.5 times the nested loop's time).
func closedRenterWalletsMetric() obs.SQLMetric {
	return obs.SQLMetric{
		Name: "gpubill_ledger_closed_renter_wallets", Type: obs.Gauge, Labels: []string{"currency", "sign"},
		Help: "Wallets of closed renters whose balance is not zero, by currency and sign: positive, money held for a renter gpubill no longer serves (a reversal of its refund or of a charge put it back); negative, a debt not written off.",
		Query: `select b.currency, case when b.credits > b.debits then 'positive' else 'negative' end, count(*)::float8
			from ledger.renters r
			cross join lateral (select b.currency, b.debits, b.credits from ledger.balances b
				where b.account = ('renter:' || r.renter_id || ':wallet') collate "C" and b.credits <> b.debits offset 0) b
			where r.closed_at is not null
			group by 1, 2`,
	}
}

// invoiceMetrics read the months whose invoice run completed
// (ledger.invoice_runs). Invoices are made only for wallets that moved, so
// a month never run looked like a month with nothing to invoice: after a
// restore onto a new Temporal the 1st's run had not happened and nothing
// said so. Months in the tax zone (taxperiod, as IssueMonth's); one whose
// run completed is not asked for again. Only the months that ended since
// months are recorded (ledger.invoice_runs_from: the migration, an
// upgrade's or a fresh install's) are asked for: counted from the first
// recorded run, a month re-run by hand became the first and the months
// since it read unissued, an upgrade after quiet months read them
// unissued at once, and a fresh install with no run read 0 for ever.
func invoiceMetrics(taxPeriods taxperiod.Calendar) []obs.SQLMetric {
	zone := "'" + strings.ReplaceAll(taxPeriods.Location().String(), "'", "''") + "'"
	return []obs.SQLMetric{{
		Name: "gpubill_invoices_last_issued_period_timestamp_seconds", Type: obs.Gauge,
		Help:  "Start of the latest month (in the tax zone) whose renter invoices were issued: its run went through every wallet that moved in it (0: none yet).",
		Query: `select coalesce((select extract(epoch from period_start) from ledger.invoice_runs order by period desc limit 1), 0)::float8`,
	}, {
		// Every month since the migration (a few a year), each looked up
		// by its key.
		Name: "gpubill_invoices_unissued_age_seconds", Type: obs.Gauge,
		Help: "Time since the end of the oldest month (in the tax zone, ended since months are recorded) whose renter invoices " +
			"were not issued (no run went through every wallet that moved in it); 0: none. The monthly run is at 01:00 on the 1st there.",
		Query: `select coalesce(extract(epoch from now() - min((m + interval '1 month') at time zone ` + zone + `)), 0)::float8
			from ledger.invoice_runs_from f,
				generate_series(date_trunc('month', f.recorded_from at time zone ` + zone + `),
					date_trunc('month', now() at time zone ` + zone + `) - interval '1 month', interval '1 month') m
			where not exists (select 1 from ledger.invoice_runs i where i.period = to_char(m, 'YYYY-MM'))`,
	}}
}

// businessDaysSQL is SQL for the time from the instant from to the
// instant to (timestamptz expressions) that falls on a Monday to Friday,
// in days: Saturdays and Sundays in UTC, the zone a statement's date
// closes in (its end, UTC, unless the bank gives the closing balance's
// date-time). Zero when from is after to (a close up to 48 h ahead is
// imported).
func businessDaysSQL(from, to string) string {
	return `(select coalesce(sum(extract(epoch from
			greatest(least(day + interval '1 day', span.upto) - greatest(day, span.since), interval '0'))), 0)::float8 / 86400
		from (select (` + from + `) at time zone 'UTC' as since, (` + to + `) at time zone 'UTC' as upto) span
		cross join generate_series(date_trunc('day', span.since), span.upto, interval '1 day') day
		where extract(isodow from day) < 6)`
}

// unchainableProbe is how many of the latest transactions
// gpubill_ledger_unchainable_transactions looks at.
const unchainableProbe = "1000"

// auditChainMetric is gpubill_ledger_audit_chain_breaks. Paged, so read
// first too (metricsIn). ledger verify walks the whole audit chain, only
// when run; this checks the latest auditChainProbe records' links on every
// scrape (by the primary key, a sha256 each), so a record deleted or edited
// there by the tables' owner with the trigger disabled is seen at once. It
// recomputes with ledger.audit_hash (migration ledger/0030), which that
// owner could replace: verify, which does not, is the proof.
func auditChainMetric() obs.SQLMetric {
	return obs.SQLMetric{
		Name: "gpubill_ledger_audit_chain_breaks", Type: obs.Gauge,
		Help: "Of the latest " + auditChainProbe + " audit records, those whose hash-chain link does not verify (prev_hash not the previous record's hash, or content not matching its hash): ledger.audit_events was altered; gpubill ledger verify names the first.",
		Query: `select count(*)::float8 from (
			select (a.r).prev_hash, (a.r).hash, ledger.audit_hash((a.r).prev_hash, a.r) as recomputed,
				lag((a.r).hash) over (order by (a.r).seq) as before, row_number() over (order by (a.r).seq desc) as newest
			from (select r from ledger.audit_events r order by seq desc limit ` + auditChainProbe + ` + 1) a
		) c
		where newest <= ` + auditChainProbe + ` and (prev_hash <> coalesce(before, prev_hash) or hash <> recomputed)`,
	}
}

// auditChainProbe is how many of the latest audit records
// gpubill_ledger_audit_chain_breaks checks.
const auditChainProbe = "1000"

// checkpointTick is how often the ledger looks whether a balance
// checkpoint is due (app.Reports.CheckpointStep decides).
const checkpointTick = time.Minute

// checkpointFailures counts failed checkpoint steps: logged only, no
// checkpoint was made or rebuilt and nothing said so (as-of reports leave
// out the checkpoints a posting committed late into, so they stay exact,
// but read more of the journal the longer the step fails).
var checkpointFailures = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_ledger_checkpoint_failures_total",
	Help: "Balance checkpoint steps that failed (the ledger's log says why); until one succeeds no checkpoint is made or rebuilt and as-of reports read more postings.",
})

// checkpointDeferred counts the checkpoints put off because a writer open
// when the checkpoint was fenced off stayed open past the wait (a charge
// batch of minutes: normal, not a failure; the next step tries again). As-of
// reports stay exact, but a checkpoint put off step after step leaves them
// reading more of the journal.
var checkpointDeferred = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_ledger_checkpoint_deferred_total",
	Help: "Balance checkpoints put off because a write transaction stayed open past the checkpoint's wait (the ledger's log says when and how many); the next step tries again.",
})

func (s *Service) runCheckpoints(ctx context.Context) error {
	return svc.Every(ctx, checkpointTick, func() { s.checkpointStep(ctx) })
}

// checkpointStep is one checkpoint step of runCheckpoints: a checkpoint put
// off by a writer open past the wait is counted and a warning, not a failure
// (a charge batch of minutes is normal; another checkpointer holding the
// lock says nothing).
func (s *Service) checkpointStep(ctx context.Context) {
	_, err := s.reports.CheckpointStep(ctx)
	var deferred *domain.CheckpointDeferred
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.As(err, &deferred):
		checkpointDeferred.Inc()
		s.deps.Log.Warn("balance checkpoint put off: write transactions still open", "at", deferred.At,
			"open_writers", deferred.OpenWriters, "waited", deferred.Waited)
	default:
		checkpointFailures.Inc()
		s.deps.Log.Error("balance checkpoint", "err", err)
	}
}

func newReports(pool *pgxpool.Pool, now func() time.Time) *app.Reports {
	return &app.Reports{Store: &postgres.Reports{Pool: pool, Now: now}, Statements: &postgres.Statements{Pool: pool}, Now: now}
}

// ExportSegregatedFunds renders the segregated-funds report (json, csv or
// pdf) straight from the database (the CLI, on a read-only pool); progress
// (may be nil) hears how many client lines of how many are written.
func ExportSegregatedFunds(ctx context.Context, pool *pgxpool.Pool, asOf *time.Time, currency, format string,
	progress func(done, total int)) ([]byte, error) {
	if _, err := ports.CheckReportFormat(format); err != nil {
		return nil, err
	}
	rep, err := newReports(pool, func() time.Time { return time.Now().UTC() }).SegregatedFunds(ctx, asOf, currency)
	if err != nil {
		return nil, err
	}
	b, _, err := ports.RenderReport(rep, format, progress)
	return b, err
}

// App exposes the use cases to tests and the CLI in this module.
func (s *Service) App() *app.App { return s.app }

// LeaseControl is the service's lease control (tests).
func (s *Service) LeaseControl() *app.LeaseControl { return s.lease }

// Reconciliations exposes the bank reconciliation use cases to tests in this module.
func (s *Service) Reconciliations() *app.Reconciliations { return s.recons }

// Statements exposes the bank-statement use cases to tests in this module.
func (s *Service) Statements() *app.Statements { return s.statements }

// Reports exposes the report use cases to tests and the CLI in this module.
func (s *Service) Reports() *app.Reports { return s.reports }

// CheckpointDeferred is the error of a checkpoint step that put its
// checkpoint off because a writer stayed open past the wait (errors.As): not
// a failure, a later step makes it.
type CheckpointDeferred = domain.CheckpointDeferred

// VerifyResult is the outcome of `gpubill ledger verify`.
type VerifyResult = postgres.VerifyResult

// VerifyChain walks the hash chain, recomputing every link from the journal,
// and names the first transaction whose content no longer matches.
func VerifyChain(ctx context.Context, q postgres.Querier) (VerifyResult, error) {
	return postgres.Verify(ctx, q)
}

// MarkCheckpointsStale marks the balance checkpoints at or after since to
// be rebuilt, as the late-posting trigger (ledger/0040) does for a posting
// committed late: reports and verify leave them out at once, and the next
// checkpoint step rebuilds them from the checkpoint before since. For
// checkpoints made stale with no trigger to mark them (before ledger/0040,
// or with it disabled): `gpubill ledger checkpoints rebuild --since`.
// Returns how many checkpoints are marked.
func MarkCheckpointsStale(ctx context.Context, q postgres.Querier, since time.Time) (int, error) {
	return postgres.MarkStale(ctx, q, since)
}

// ChainLinkHash is the hex hash of the chain's link at position (not found:
// an error naming it).
func ChainLinkHash(ctx context.Context, q postgres.Querier, position int64) (string, error) {
	return postgres.LinkHash(ctx, q, position)
}

// AuditRecordHash is the hex hash of the audit record at seq, and whether
// the audit log holds one (ledger verify --audit-head).
func AuditRecordHash(ctx context.Context, q postgres.Querier, seq int64) (string, bool, error) {
	return postgres.AuditRecordHash(ctx, q, seq)
}

// ChainOnce extends the hash chain by one round (tests, the CLI before verify),
// reading every transaction back from the journal.
func ChainOnce(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	return app.ChainWorker{Chain: postgres.Chain{Pool: pool}}.Step(ctx)
}

// ChainOnce extends the hash chain by one round as the service's chain
// worker does: what this service wrote is hashed as written.
func (s *Service) ChainOnce(ctx context.Context) (int, error) {
	return app.ChainWorker{Chain: postgres.Chain{Pool: s.deps.Pool, Written: s.written}}.Step(ctx)
}

// Invoicing exposes the invoice use cases to tests in this module (they
// stand in pricing's explanations with their own).
func (s *Service) Invoicing() *invoicing.Invoicing { return s.invoicing }

// Figures identify the ledger's content (chain head, counts, per-currency
// totals, a digest of every balance) as q sees it: a backup's manifest, and
// what a restore must find again.
type Figures = postgres.Figures

// CurrencyFigure is one currency's line of Figures.
type CurrencyFigure = postgres.CurrencyFigure

// ReadFigures reads the ledger's Figures in q's snapshot (a pool, a
// connection or a REPEATABLE READ transaction).
func ReadFigures(ctx context.Context, q postgres.Querier) (Figures, error) {
	return postgres.ReadFigures(ctx, q)
}
