package payout

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	alipaypkg "github.com/gpubill/gpubill/pkg/alipay"
	wechatpaypkg "github.com/gpubill/gpubill/pkg/wechatpay"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/bankfile"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Types a caller outside the module names: the configuration's parts, and
// for the stack tests a rail, a payout and a webhook.
type (
	// Timing is the payout workflows' timing (Config.Timing).
	Timing = app.Timing
	// BankConfig is the bank-file rail's settings (Config.Bank).
	BankConfig = bankfile.Config
	// Rail is where a payout's money goes (the sandbox, the bank file).
	Rail = app.Rail
	// Ledger is where a payout's movements are posted (the ledger service).
	Ledger = app.Ledger
	// LedgerTransfer is one movement a payout posts.
	LedgerTransfer = domain.LedgerTransfer
	// Transfer is what a rail is asked to pay.
	Transfer = app.Transfer
	// RailStatus is a rail's answer about a reference.
	RailStatus = app.RailStatus
	// Payout is one payout as payout stores it.
	Payout = domain.Payout
	// Webhook is a provider's webhook endpoint.
	Webhook = domain.Webhook
	// WebhookEvent is the body a webhook delivery posts.
	WebhookEvent = domain.WebhookEvent
)

// WorkflowID is the id of a payout's workflow on the service's task queue
// (payout-{id} on TaskQueueDefault).
func (s *Service) WorkflowID(payoutID string) string { return domain.WorkflowIDOn(s.queue, payoutID) }

// API is the PayoutService implementation, for in-process callers.
func (s *Service) API() payoutv1.PayoutServiceServer { return s.api }

// TestHooks reach inside a Service for the payout tests that run it with
// the real ledger (services/gpubill/internal/payoutstack: they live in the
// edition that composes the services, so that payout's module requires no
// other service). Not for production callers.
type TestHooks struct{ s *Service }

// TestHooks returns the service's test hooks.
func (s *Service) TestHooks() TestHooks { return TestHooks{s} }

// SetWebhookBackoff sets the first retry delay of webhook deliveries.
func (h TestHooks) SetWebhookBackoff(d time.Duration) { h.s.hooks.BackoffFirst = d }

// ReplaceRail makes payouts go to f(the sandbox rail); call it before Run.
func (h TestHooks) ReplaceRail(f func(sandbox Rail) Rail) { h.s.payouts.Rail = f(h.s.sandbox) }

// ReplaceLedger makes payouts post through f(the ledger service's client);
// call it before Run.
func (h TestHooks) ReplaceLedger(f func(ledger Ledger) Ledger) {
	h.s.payouts.Ledger = f(h.s.payouts.Ledger)
}

// SandboxSubmissions counts the sandbox rail's submissions of a reference.
func (h TestHooks) SandboxSubmissions(ctx context.Context, ref string) (int, error) {
	return h.s.sandbox.Submissions(ctx, ref)
}

// SetSandboxOutage makes the sandbox rail refuse every call (on) or answer again.
func (h TestHooks) SetSandboxOutage(on bool) { h.s.sandbox.SetOutage(on) }

// LoseSandboxAnswers makes the sandbox rail book the next n submissions and lose their answers.
func (h TestHooks) LoseSandboxAnswers(n int) { h.s.sandbox.LoseAnswers(n) }

// CutBankBatch cuts the bank-file rail's batch as its cutoff does: the
// ids of its files.
func (h TestHooks) CutBankBatch(ctx context.Context, cutoff time.Time) (ids []string, built bool, err error) {
	return h.s.bank.Cut(ctx, cutoff)
}

// BankSubmissions counts the bank-file rail's submissions of a reference.
func (h TestHooks) BankSubmissions(ctx context.Context, ref string) (int, error) {
	return h.s.bank.Submissions(ctx, ref)
}

// CreateFromSettled writes a payout as the settlement.settled consumer does.
func (h TestHooks) CreateFromSettled(ctx context.Context, p Payout) error {
	return h.s.store.Tx(ctx, func(tx pgx.Tx) error {
		_, err := h.s.store.CreateFromSettled(ctx, tx, p, h.s.payouts.Minimums)
		return err
	})
}

// GetPayout reads a payout from payout's store.
func (h TestHooks) GetPayout(ctx context.Context, id string) (Payout, error) {
	return h.s.store.GetPayout(ctx, id)
}

// CreateWebhook stores a webhook without the API's address checks.
func (h TestHooks) CreateWebhook(ctx context.Context, w Webhook) error {
	_, err := h.s.store.CreateWebhook(ctx, w, math.MaxInt)
	return err
}

// AlipayClient is the Alipay rail's gateway client (nil when the rail is
// off), shared with its notification route: a test sets its NotifyURL once
// the stack listens, and makes renters' page-pay orders with it.
func (h TestHooks) AlipayClient() *alipaypkg.Client {
	if h.s.alipay == nil {
		return nil
	}
	return h.s.alipay.C
}

// WeChatPayClient is the WeChat Pay rail's API client (nil when the rail
// is off), shared with its notification route and top-up orders: a test
// sets its NotifyURL once the stack listens.
func (h TestHooks) WeChatPayClient() *wechatpaypkg.Client {
	if h.s.wechat == nil {
		return nil
	}
	return h.s.wechat.C
}
