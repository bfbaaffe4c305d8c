// Package payout is the payout service (DESIGN §6): payout methods, KYC and
// holds (the gate), one payout per settled provider, cycle and currency
// (created from settlement.settled.*; amounts still waiting join the next
// one), and one Temporal workflow per payout (payout-{id}) that moves it
// through the ledger and a rail to paid, failed or returned. New is the
// composition root; Run hosts the payout worker on its own task queue.
package payout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	alipaypkg "github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	wechatpaypkg "github.com/gpubill/gpubill/pkg/wechatpay"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/bankfile"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/ledgerclient"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/sandbox"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// TaskQueueDefault is the Temporal task queue of the payout worker.
const TaskQueueDefault = domain.TaskQueue

// Worker limits: a payout workflow mostly waits; its activities are a few
// database, ledger and rail calls.
const (
	activitiesConcurrent    = 64
	workflowTasksConcurrent = 256
)

// Config is payout's own configuration (environment, DESIGN §10 style).
type Config struct {
	// Minimums per currency (GPUBILL_PAYOUT_MINIMUMS="CNY=100.00,USD=25.00").
	Minimums domain.Minimums
	// Sandbox rail latency to paid and delay of a return
	// (GPUBILL_SANDBOX_LATENCY, GPUBILL_SANDBOX_RETURN_AFTER).
	SandboxLatency, SandboxReturnAfter time.Duration
	// Timing of the payout workflows (zero: app defaults).
	Timing app.Timing
	// WebhookAllowPrivate lets webhooks reach loopback, private,
	// link-local, multicast and unspecified addresses
	// (GPUBILL_WEBHOOK_ALLOW_PRIVATE=true; default false: refused).
	WebhookAllowPrivate bool
	// BankRail is the rail of payouts to bank accounts
	// (GPUBILL_PAYOUT_RAIL_BANK): "sandbox" (default) or "file", the
	// ISO 20022 bank-file rail configured by Bank.
	BankRail string
	// Bank is the bank-file rail's settings (GPUBILL_BANK_*).
	Bank bankfile.Config
	// Alipay is the Alipay rail's settings (GPUBILL_ALIPAY_*); AlipayOn:
	// payouts to Alipay accounts go to it and its payment notifications
	// are served (else they go to the sandbox and nothing is served).
	Alipay   alipaypkg.Config
	AlipayOn bool
	// WeChatPay is the WeChat Pay rail's settings (GPUBILL_WECHATPAY_*);
	// WeChatPayOn: payouts to WeChat openids go to it and its
	// notifications are served (else they go to the sandbox and nothing
	// is served).
	WeChatPay   wechatpaypkg.Config
	WeChatPayOn bool
	// Webhook secrets are sealed at rest with WebhookKey (32 bytes) when
	// set (tests); else with the key postgres.LoadWebhookKey finds: the
	// file WebhookKeyFile (GPUBILL_WEBHOOK_KEY_FILE), else HKDF-SHA256 of
	// WebhookKeySecret (GPUBILL_WEBHOOK_KEY), else DataDir/webhook.key,
	// generated on first start (the composition roots set DataDir to
	// GPUBILL_DATA_DIR).
	// WebhookRotationGrace is how long a rotated-out webhook secret still
	// signs deliveries when a rotation names no grace period
	// (GPUBILL_WEBHOOK_ROTATION_GRACE, default 24h); finance may set it
	// through the API (payout settings), as the minimums.
	WebhookRotationGrace time.Duration
	WebhookKey           []byte
	WebhookKeyFile       string
	WebhookKeySecret     string
	DataDir              string

	graceFromEnv bool
}

// Rails of bank payouts.
const (
	BankRailSandbox = "sandbox"
	BankRailFile    = "file"
)

// bankConfigFromEnv reads the bank-file rail's settings.
func bankConfigFromEnv() (bankfile.Config, error) {
	c := bankfile.Config{
		Debtor: iso20022.Party{Name: os.Getenv("GPUBILL_BANK_DEBTOR_NAME"), Account: strings.ReplaceAll(os.Getenv("GPUBILL_BANK_DEBTOR_ACCOUNT"), " ", ""),
			Agent: os.Getenv("GPUBILL_BANK_DEBTOR_AGENT")},
		InitiatingParty: os.Getenv("GPUBILL_BANK_INITIATING_PARTY"),
		OutboxDir:       os.Getenv("GPUBILL_BANK_OUTBOX_DIR"),
		InboxDir:        os.Getenv("GPUBILL_BANK_INBOX_DIR"),
		CutoffHour:      bankCutoffHourDefault,
	}
	var err error
	if v := os.Getenv("GPUBILL_BANK_CUTOFF"); v != "" {
		if c.CutoffHour, c.CutoffMinute, err = bankfile.ParseCutoff(v); err != nil {
			return c, fmt.Errorf("GPUBILL_BANK_CUTOFF: %w", err)
		}
	}
	if v := os.Getenv("GPUBILL_BANK_TIMEZONE"); v != "" {
		// "Local" is each host's own zone: replicas on differently set
		// hosts would disagree on the cut-off and the execution date.
		if v == "Local" {
			return c, fmt.Errorf("GPUBILL_BANK_TIMEZONE %q: want an IANA zone name such as Europe/London, not the host's zone", v)
		}
		if c.Location, err = time.LoadLocation(v); err != nil {
			return c, fmt.Errorf("GPUBILL_BANK_TIMEZONE: %w", err)
		}
	}
	if c.Holidays, err = bankfile.ParseHolidays(os.Getenv("GPUBILL_BANK_HOLIDAYS")); err != nil {
		return c, fmt.Errorf("GPUBILL_BANK_HOLIDAYS: %w", err)
	}
	return c, nil
}

// bankCutoffHourDefault: the daily batch is cut at 14:00 (GPUBILL_BANK_TIMEZONE, default UTC).
const bankCutoffHourDefault = 14

// ConfigFromEnv reads Config from the environment.
func ConfigFromEnv() (Config, error) {
	var c Config
	var err error
	if c.Minimums, err = domain.ParseMinimums(os.Getenv("GPUBILL_PAYOUT_MINIMUMS")); err != nil {
		return c, err
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{"GPUBILL_SANDBOX_LATENCY", &c.SandboxLatency}, {"GPUBILL_SANDBOX_RETURN_AFTER", &c.SandboxReturnAfter}, {"GPUBILL_PAYOUT_POLL_MAX", &c.Timing.PollMax}} {
		if v := os.Getenv(d.env); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil {
				return c, fmt.Errorf("%s: %w", d.env, err)
			}
		}
	}
	if v := os.Getenv("GPUBILL_WEBHOOK_ALLOW_PRIVATE"); v != "" {
		if c.WebhookAllowPrivate, err = strconv.ParseBool(v); err != nil {
			return c, fmt.Errorf("GPUBILL_WEBHOOK_ALLOW_PRIVATE: %w", err)
		}
	}
	c.BankRail = os.Getenv("GPUBILL_PAYOUT_RAIL_BANK")
	c.WebhookKeyFile, c.WebhookKeySecret = os.Getenv("GPUBILL_WEBHOOK_KEY_FILE"), os.Getenv("GPUBILL_WEBHOOK_KEY")
	if v := os.Getenv("GPUBILL_WEBHOOK_ROTATION_GRACE"); v != "" {
		if c.WebhookRotationGrace, err = domain.ParseGrace(v); err != nil {
			return c, fmt.Errorf("GPUBILL_WEBHOOK_ROTATION_GRACE: %w", err)
		}
		c.graceFromEnv = true
	}
	if c.Bank, err = bankConfigFromEnv(); err != nil {
		return c, err
	}
	if c.Alipay, c.AlipayOn, err = alipaypkg.ConfigFromEnv(); err != nil {
		return c, err
	}
	if c.WeChatPay, c.WeChatPayOn, err = wechatpaypkg.ConfigFromEnv(time.Now()); err != nil {
		return c, err
	}
	return c, c.checkRails()
}

// checkRails refuses an unknown bank rail, and a bank-file rail without
// the client account it pays from.
func (c Config) checkRails() error {
	if c.AlipayOn {
		if err := c.Alipay.Check(); err != nil {
			return err
		}
	}
	if c.WeChatPayOn {
		if err := c.WeChatPay.Check(); err != nil {
			return err
		}
	}
	switch c.BankRail {
	case "", BankRailSandbox:
		return nil
	case BankRailFile:
		return c.Bank.Check()
	}
	return fmt.Errorf("GPUBILL_PAYOUT_RAIL_BANK %q: want sandbox or file", c.BankRail)
}

// CheckAlone refuses what a payout service run on its own (its command, a
// container) must not start with: no rail chosen, and no webhook key given.
// Without a rail the sandbox takes every payout and marks it paid with no
// money leaving; the sandbox runs only when GPUBILL_PAYOUT_RAIL_BANK=sandbox
// says so. A key generated into the data dir goes with the container and
// differs per replica: secrets sealed with it no longer open, and start-up
// then refuses for good. `gpubill dev` keeps both defaults.
func (c Config) CheckAlone() error {
	if c.BankRail == "" && !c.AlipayOn && !c.WeChatPayOn {
		return errors.New("payout alone with no rail: set GPUBILL_PAYOUT_RAIL_BANK=file (with GPUBILL_BANK_*), " +
			"GPUBILL_ALIPAY_*, GPUBILL_WECHATPAY_*, or GPUBILL_PAYOUT_RAIL_BANK=sandbox to have the sandbox mark payouts paid with no money leaving")
	}
	if c.WebhookKeyFile == "" && c.WebhookKeySecret == "" && c.WebhookKey == nil {
		return errors.New("payout alone with no webhook key: set GPUBILL_WEBHOOK_KEY_FILE (32 bytes, hex or base64: " +
			"a data dir's webhook.key is one) or GPUBILL_WEBHOOK_KEY (at least 32 characters); a key generated into the data dir " +
			"is lost with the container and differs per replica, and the webhook secrets sealed with it no longer open")
	}
	return nil
}

// Service is the payout service.
type Service struct {
	d       svc.Deps
	tc      client.Client
	queue   string
	store   *postgres.Store
	sandbox *sandbox.Sandbox
	payouts *app.Payouts
	topups  *app.TopUps // the rails' top-up and payout notifications
	bank    *bankfile.Rail
	bankOn  bool            // bank payouts go to the bank-file rail
	alipay  *alipay.Rail    // nil unless configured
	wechat  *wechatpay.Rail // nil unless configured
	orders  *app.TopUpOrders
	acts    *ports.Activities
	flow    *ports.Workflows
	hooks   *ports.Deliverer
	api     *ports.Server
	// routes are the plain HTTP routes of the rails' notifications
	// (HTTPRoutes), for the rails configured.
	routes map[string]http.Handler
}

// New migrates payout's schema, ensures its streams and wires the service
// with the sandbox rail.
func New(ctx context.Context, d svc.Deps, tc client.Client, taskQueue string, cfg Config) (*Service, error) {
	if tc == nil {
		return nil, errors.New("payout needs a Temporal client")
	}
	if taskQueue == "" {
		taskQueue = TaskQueueDefault
	}
	if cfg.Minimums == nil {
		cfg.Minimums = domain.DefaultMinimums()
	}
	if err := pg.Migrate(ctx, d.Pool, postgres.Schema, migrations.For(postgres.Schema)); err != nil {
		return nil, err
	}
	if d.JS != nil {
		if err := d.Streams.EnsureStreams(ctx, d.JS, d.Log, natsx.StreamSettlement, natsx.StreamPayout, natsx.StreamLedger); err != nil {
			return nil, err
		}
	}
	epoch, err := pg.RestoreEpoch(ctx, d.Pool, postgres.Schema)
	if err != nil {
		return nil, err
	}
	st, err := newStore(ctx, d, cfg, epoch)
	if err != nil {
		return nil, err
	}
	s := &Service{d: d, tc: tc, queue: taskQueue, store: st}
	s.flow = ports.NewWorkflows(st, tc, taskQueue, cfg.Timing, d.Log)
	s.sandbox = &sandbox.Sandbox{Pool: d.Pool, Clock: d.Clock, Latency: cfg.SandboxLatency, ReturnAfter: cfg.SandboxReturnAfter, Notify: s.flow.RailCallback}
	if err := cfg.checkRails(); err != nil {
		return nil, err
	}
	rail := s.wireRails(cfg)
	lc := ledgerclient.Ledger{Client: ledgerv1.NewLedgerServiceClient(d.Internal)}
	s.payouts = &app.Payouts{Store: st, Ledger: lc, Entries: lc, Rail: rail, Minimums: cfg.Minimums, Clock: d.Clock, Log: d.Log,
		SettledOutsideCheckLock: pg.SessionLock{Pool: d.Pool, Key: app.SettledOutsideCheckLockKey}}
	s.topups = &app.TopUps{Ledger: ledgerclient.Ledger{Client: ledgerv1.NewLedgerServiceClient(d.Internal)}, Store: st, Clock: d.Clock, Log: d.Log}
	s.wireTopUps(cfg)
	s.acts = &ports.Activities{App: s.payouts}
	guard := ports.WebhookGuard{AllowPrivate: cfg.WebhookAllowPrivate}
	s.api = &ports.Server{Store: st, App: s.payouts, Clock: d.Clock, Flow: s.flow, Webhooks: guard, Bank: s.bank, Defaults: settingDefaults(cfg),
		Epoch: epoch}
	s.hooks = &ports.Deliverer{Store: st, Clock: d.Clock, Log: d.Log, Guard: guard}
	return s, nil
}

// newStore opens payout's store with the webhook-secret box, sealing any
// secret still stored in the clear and checking the box's key is the one
// the secrets were sealed with; its events' ids carry the restore epoch.
func newStore(ctx context.Context, d svc.Deps, cfg Config, epoch string) (*postgres.Store, error) {
	box, err := webhookBox(cfg, d.Log)
	if err != nil {
		return nil, err
	}
	st := &postgres.Store{Pool: d.Pool, Event: ports.StatusChangedEvent(epoch), Cache: &postgres.PayoutCache{Pool: d.Pool, Log: d.Log}, Box: box}
	if n, err := st.SealLegacySecrets(ctx); err != nil {
		return nil, fmt.Errorf("seal webhook secrets: %w", err)
	} else if n > 0 {
		d.Log.Info("webhook secrets sealed", "webhooks", n, "key_id", box.KeyID)
	}
	if err := st.CheckWebhookKey(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// wireRails builds the rails configured and returns the one payouts go
// through: the sandbox, or a router by payout method over the sandbox.
func (s *Service) wireRails(cfg Config) app.Rail {
	d := s.d
	// The bank-file rail's book is always readable (batches, imports); it
	// takes payouts only when GPUBILL_PAYOUT_RAIL_BANK=file.
	s.bank = &bankfile.Rail{Pool: d.Pool, Clock: d.Clock, Cfg: cfg.Bank, Log: d.Log, Notify: s.flow.RailNews}
	s.bankOn = cfg.BankRail == BankRailFile
	byType := map[string]app.Rail{}
	if s.bankOn {
		byType[domain.MethodBank] = s.bank
	}
	if cfg.BankRail == BankRailSandbox { // chosen, not left over
		byType[domain.MethodBank] = s.sandbox
	}
	if cfg.AlipayOn {
		s.alipay = &alipay.Rail{C: &alipaypkg.Client{Cfg: cfg.Alipay, Clock: d.Clock}, Log: d.Log}
		byType[domain.MethodAlipay] = s.alipay
	}
	if cfg.WeChatPayOn {
		s.wechat = &wechatpay.Rail{C: &wechatpaypkg.Client{Cfg: cfg.WeChatPay, Clock: d.Clock}, Log: d.Log}
		byType[domain.MethodWechat] = s.wechat
	}
	var readable []app.Rail
	if !s.bankOn {
		readable = []app.Rail{s.bank} // its payouts from before are followed still
	}
	if !s.bankOn && !cfg.AlipayOn && !cfg.WeChatPayOn {
		// No real rail: the sandbox pays every method.
		return startMismatchSeries(app.Router{Default: s.sandbox, Readable: readable})
	}
	// A real rail is on: a method type with no rail of its own fails
	// (unsupported_by_rail) instead of being "paid" by the sandbox.
	return startMismatchSeries(app.Router{Default: s.sandbox, ByType: byType, Strict: true, Readable: readable})
}

// wireTopUps serves the configured rails' notifications and offers their
// checkout to top-ups (when the rail has a URL to notify gpubill at).
func (s *Service) wireTopUps(cfg Config) {
	d := s.d
	s.routes = map[string]http.Handler{}
	s.orders = &app.TopUpOrders{Rails: map[string]app.Checkout{}, Orders: s.store, Clock: d.Clock}
	if s.alipay != nil {
		s.routes["POST "+alipay.NotifyPath] = &alipay.Notifications{C: s.alipay.C, TopUps: s.topups, Count: ports.CountNotification, Clock: d.Clock, Log: d.Log}
		if cfg.Alipay.NotifyURL != "" { // without it Alipay could not tell gpubill of the payment
			s.orders.Rails[alipay.Name] = alipay.Checkout{C: s.alipay.C}
		}
	}
	if s.wechat != nil {
		s.routes["POST "+wechatpay.NotifyPath] = &wechatpay.Notifications{C: s.wechat.C, TopUps: s.topups, Orders: s.store,
			Notify: s.flow.RailNews, Count: ports.CountNotification, Clock: d.Clock, Log: d.Log}
		if cfg.WeChatPay.NotifyURL != "" { // without it WeChat Pay could not tell gpubill of the payment
			s.orders.Rails[wechatpay.Name] = wechatpay.Checkout{C: s.wechat.C, Log: d.Log}
		}
	}
}

// settingDefaults are the payout settings' defaults: the environment's.
func settingDefaults(cfg Config) ports.Defaults {
	d := ports.Defaults{Minimums: cfg.Minimums, Grace: cfg.WebhookRotationGrace, GraceFromEnv: cfg.graceFromEnv || cfg.WebhookRotationGrace > 0,
		MinimumsInEnv: map[string]bool{}}
	def := domain.DefaultMinimums()
	for c, m := range cfg.Minimums {
		if dm, ok := def[c]; !ok || !dm.Equal(m) {
			d.MinimumsInEnv[c] = true
		}
	}
	return d
}

// webhookBox is the box webhook secrets are sealed with.
func webhookBox(cfg Config, log *slog.Logger) (*postgres.SecretBox, error) {
	key, source := cfg.WebhookKey, "Config.WebhookKey"
	if key == nil {
		var err error
		if key, source, err = postgres.LoadWebhookKey(cfg.WebhookKeyFile, cfg.WebhookKeySecret, cfg.DataDir); err != nil {
			return nil, err
		}
	}
	box, err := postgres.NewSecretBox(key)
	if err != nil {
		return nil, err
	}
	log.Info("webhook secrets sealed with", "key_source", source, "key_id", box.KeyID)
	return box, nil
}

// Name implements svc.Service.
func (s *Service) Name() string { return "payout" }

// ReadyChecks implements svc.ReadyChecker: run alone, payout is ready only
// while its Temporal frontend answers.
func (s *Service) ReadyChecks() []server.Check {
	return []server.Check{{Name: "temporal", Check: func(ctx context.Context) error {
		_, err := s.tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}}}
}

// HTTPRoutes implements server.HTTPRoutes: the notification routes of the
// rails configured (POST /v1/rails/alipay/notify, /v1/rails/wechatpay/notify), outside the token guard
// — each authenticates its caller by the rail's signature.
func (s *Service) HTTPRoutes() map[string]http.Handler { return s.routes }

// RegisterGRPC implements svc.Service.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	payoutv1.RegisterPayoutServiceServer(g, s.api)
	payoutv1.RegisterTopUpServiceServer(g, &ports.TopUpServer{Orders: s.orders})
}

// RegisterGateway implements svc.Service.
func (s *Service) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	if err := payoutv1.RegisterPayoutServiceHandlerClient(ctx, mux, payoutv1.NewPayoutServiceClient(conn)); err != nil {
		return err
	}
	return payoutv1.RegisterTopUpServiceHandlerClient(ctx, mux, payoutv1.NewTopUpServiceClient(conn))
}

// Policy implements svc.Service (DESIGN §7): providers see and set up only
// their own, renters open only their own top-ups (checked in the
// handlers); payout operations are finance's.
func (s *Service) Policy() auth.Policy {
	const p, tu = "/gpubill.payout.v1.PayoutService/", "/gpubill.payout.v1.TopUpService/"
	own := []string{auth.RoleProvider, auth.RoleFinance, auth.RoleAdmin}
	finance := []string{auth.RoleFinance, auth.RoleAdmin}
	return auth.Policy{
		p + "GetPayout":                   own,
		p + "ListProviderPayouts":         own,
		p + "PutPayoutMethod":             own,
		p + "GetPayoutMethod":             own,
		p + "PutKyc":                      own,
		p + "CancelPayout":                finance,
		p + "RetryPayout":                 finance,
		p + "ResolvePayoutAmountMismatch": finance,
		p + "SettlePayoutOutside":         finance,
		p + "HoldProviderPayouts":         finance,
		p + "CreateWebhook":               own,
		p + "ListWebhooks":                own,
		p + "RotateWebhookSecret":         own,
		p + "GetPayoutSettings":           {auth.RoleFinance, auth.RoleAdmin, auth.RoleAuditor},
		p + "UpdatePayoutSettings":        finance,
		p + "ListWebhookDeliveries":       own,
		p + "DeleteWebhook":               own,
		p + "RedeliverWebhookDelivery":    own,
		p + "ListPayoutBatches":           finance,
		p + "GetPayoutBatch":              finance,
		p + "GetPayoutBatchFile":          finance,
		p + "ImportBankFile":              finance,
		p + "GetBankFileRestoreHold":      finance,
		p + "ReleaseBankFileRestoreHold":  finance,
		p + "ResolveBankTransfer":         finance,
		tu + "CreateTopUp":                {auth.RoleRenter, auth.RoleFinance, auth.RoleAdmin},
	}
}

// Register registers the payout workflow and activities on a worker (or a
// test environment's registry).
func Register(w worker.Registry, acts *ports.Activities) {
	w.RegisterWorkflowWithOptions(app.Workflow, workflow.RegisterOptions{Name: app.WorkflowName})
	acts.Register(w)
}

// NewWorker returns a payout worker on the service's task queue.
func (s *Service) NewWorker() worker.Worker {
	w := worker.New(s.tc, s.queue, worker.Options{
		MaxConcurrentActivityExecutionSize:     activitiesConcurrent,
		MaxConcurrentWorkflowTaskExecutionSize: workflowTasksConcurrent,
	})
	Register(w, s.acts)
	return w
}

// Run hosts the payout worker, the workflow starter, the webhook
// deliverer, the listener that keeps the poll cache current, the consumer of settlement.settled.*, the wake of payouts
// waiting for available (ledger.posted.provider), the consumer of the
// ledger's reversals (ledger.reversed.*: payouts settled outside by a
// reversed entry fail again) and the outbox relay
// until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	w := s.NewWorker()
	if err := w.Start(); err != nil {
		return fmt.Errorf("start payout worker: %w", err)
	}
	defer w.Stop()
	defer s.sandbox.Stop()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.flow.Run(ctx) })
	g.Go(func() error { return s.hooks.Run(ctx) })
	g.Go(func() error { return s.store.Cache.Run(ctx) })
	g.Go(func() error { return s.payouts.RunSettledOutsideCheck(ctx, app.SettledOutsideCheckEvery) })
	if s.bankOn {
		g.Go(func() error { return s.bank.Run(ctx) })
	}
	if s.d.JS != nil {
		g.Go(func() error {
			return ports.ConsumeSettled(ctx, s.d.JS, s.payouts, s.d.Log, s.flow, deadletter.New(s.d.Pool, postgres.Schema, s.d.Log))
		})
		g.Go(func() error { return ports.WakeOnCredits(ctx, s.d.JS, s.store, s.flow, s.d.Log) })
		g.Go(func() error {
			return ports.ConsumeReversals(ctx, s.d.JS, s.payouts, s.d.Log, deadletter.New(s.d.Pool, postgres.Schema, s.d.Log))
		})
		g.Go(func() error {
			return (&outbox.Relay{Pool: s.d.Pool, JS: s.d.JS, Schema: postgres.Schema, Log: s.d.Log}).Run(ctx)
		})
	}
	return g.Wait()
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
