// Package ports holds settlement's edges: the Temporal activities the
// workflows call, the gRPC handlers, and the party read-model consumer.
package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/shopspring/decimal"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Limits of the activities.
const (
	snapshotPageSize  = 1000 // ledger balances per ListCycleBalances call
	statementLinesMax = 200  // charge lines kept on a statement (the rest: see the ledger journal)
)

// Error types of business failures (non-retryable).
const (
	errTypeInvalid = "InvalidSettlement"
)

// Activities are the settlement activities: settlement.Register registers
// each under its app.Act* name. PostSettlement and the other steps of
// SettleProvider are not activities of their own.
type Activities struct {
	Store      *adapters.Store
	Ledger     ledgerv1.LedgerServiceClient
	Recon      ledgerv1.ReconciliationServiceClient
	Tax        taxv1.TaxServiceClient
	Invoices   ledgerv1.InvoiceServiceClient
	Temporal   client.Client    // to start the next cycle's workflow
	Page       *app.PageSettler // SettleProviders (its runner: WorkflowRunner)
	TaskQueue  string
	Commission split.CommissionPolicy
	Calendar   cycles.Calendar
	Clock      clock.Clock
	Log        *slog.Logger
	BatchSize  int // providers per cycle run (app.CycleInput.BatchSize)
	Window     int // provider workflows in flight per page (app.CycleInput.Window)
}

// nonRetryable marks a business failure that retrying cannot fix.
func nonRetryable(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), errTypeInvalid, err)
}

// step adds what failed to err, keeping a business failure non-retryable
// (the SDK reads only the outermost error when it records the failure).
func step(what string, err error) error {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		return temporal.NewNonRetryableApplicationError(what+": "+err.Error(), ae.Type(), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// grpcErr classifies a gRPC error: bad input or a conflict is a business
// failure; anything else (unavailable, deadline) is retried.
func grpcErr(what string, err error) error {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted, codes.PermissionDenied, codes.NotFound:
		return nonRetryable(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// EnsureCycle records the cycle (open) and returns its status.
func (a *Activities) EnsureCycle(ctx context.Context, cycleID string) (app.CycleInfo, error) {
	cy, err := a.Calendar.Parse(cycleID)
	if err != nil {
		return app.CycleInfo{}, nonRetryable(err)
	}
	st, err := a.Store.EnsureCycle(ctx, cy)
	if err != nil {
		return app.CycleInfo{}, err
	}
	return app.CycleInfo{CycleID: cycleID, Status: st}, nil
}

// StartNextCycle starts the workflow of the cycle after cycleID (idempotent).
func (a *Activities) StartNextCycle(ctx context.Context, cycleID string) error {
	cy, err := a.Calendar.Parse(cycleID)
	if err != nil {
		return nonRetryable(err)
	}
	return StartCycleWorkflow(ctx, a.Temporal, a.TaskQueue, a.Calendar.Next(cy), a.BatchSize, a.Window)
}

// StartCycleWorkflow starts settle-{cycle} waiting for the cycle's close,
// unless a run exists or has completed (closing twice changes nothing);
// batch and window are app.CycleInput's BatchSize and Window.
func StartCycleWorkflow(ctx context.Context, tc client.Client, queue string, cy cycles.Cycle, batch, window int) error {
	_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       domain.CycleWorkflowID(cy.ID),
		TaskQueue:                queue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, app.CycleWorkflowName, app.CycleInput{CycleID: cy.ID, ClosesAt: cy.Closes, BatchSize: batch, Window: window})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return fmt.Errorf("start %s: %w", domain.CycleWorkflowID(cy.ID), err)
	}
	return nil
}

// BeginClose marks the cycle closing, closes it in the ledger (new charges
// go to the next open cycle) and publishes settlement.cycle.closed.{cycle}.
func (a *Activities) BeginClose(ctx context.Context, in app.BeginCloseInput) error {
	now := a.Clock.Now()
	ev, err := proto.Marshal(&eventsv1.CycleClosed{CycleId: in.CycleID, ClosedAt: timestamppb.New(now)})
	if err != nil {
		return err
	}
	if _, err := a.Store.BeginClose(ctx, in.CycleID, in.Reason, now, outbox.Message{
		ID: "cycle-closed-" + in.CycleID, Subject: subjects.CycleClosed.Of(in.CycleID), Payload: ev,
	}); err != nil {
		return err
	}
	if _, err := a.Ledger.CloseLedgerCycle(ctx, &ledgerv1.CloseLedgerCycleRequest{CycleId: in.CycleID}); err != nil {
		return grpcErr("close ledger cycle "+in.CycleID, err)
	}
	return nil
}

// SnapshotCycle pages through the ledger's pending balances of the cycle
// (frozen: the ledger has closed the cycle) and records each provider's
// gross per currency, so the close pages through its own stable table.
func (a *Activities) SnapshotCycle(ctx context.Context, cycleID string) (int, error) {
	_, done, err := a.Store.CycleStatus(ctx, cycleID)
	if err != nil {
		return 0, err
	}
	if done {
		return 0, nil
	}
	token, n := "", 0
	if activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &token); err != nil {
			// Start over: recording a page twice writes the same rows.
			activity.GetLogger(ctx).Warn("snapshot: heartbeat page token unreadable; starting from the first page", "cycle", cycleID, "err", err)
			token = ""
		}
	}
	for {
		resp, err := a.Ledger.ListCycleBalances(ctx, &ledgerv1.ListCycleBalancesRequest{CycleId: cycleID, PageSize: snapshotPageSize, PageToken: token})
		if err != nil {
			return n, grpcErr("list cycle balances of "+cycleID, err)
		}
		rows := make([]domain.Balance, 0, len(resp.Balances))
		for _, b := range resp.Balances {
			amt, err := money.ParseDecimal(b.Amount)
			if err != nil {
				return n, nonRetryable(fmt.Errorf("balance of %s %s: %w", b.ProviderId, b.Currency, err))
			}
			if !amt.IsPositive() {
				continue // nothing to settle; a negative pending balance is the ledger's to explain
			}
			rows = append(rows, domain.Balance{ProviderID: b.ProviderId, Currency: b.Currency, Amount: amt})
		}
		if err := a.Store.SnapshotBalances(ctx, cycleID, rows); err != nil {
			return n, err
		}
		n += len(rows)
		token = resp.NextPageToken
		activity.RecordHeartbeat(ctx, token)
		if token == "" {
			break
		}
	}
	return n, a.Store.MarkSnapshotDone(ctx, cycleID)
}

// NextProviders returns the next batch of providers to settle.
func (a *Activities) NextProviders(ctx context.Context, in app.NextProvidersInput) ([]string, error) {
	return a.Store.NextProviders(ctx, in.CycleID, in.After, in.Limit)
}

// CompleteCycle marks the cycle settled.
func (a *Activities) CompleteCycle(ctx context.Context, cycleID string) error {
	return a.Store.CompleteCycle(ctx, cycleID, a.Clock.Now())
}

// SettleProvider is the provider workflow's one local activity: prepare (hold,
// tier, gross per currency), then per unsettled currency the tax split, the
// settlement transaction with its commission sweep and the statement with
// settlement.settled. Every step is idempotent (tax and ledger on the
// settlement/sweep keys, the statement on the settlement row and outbox
// message id), so a retry after a crash anywhere repeats nothing.
func (a *Activities) SettleProvider(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error) {
	prep, err := a.prepareProvider(ctx, in)
	if err != nil {
		return app.ProviderResult{}, step("prepare", err)
	}
	if prep.Held {
		return app.ProviderResult{Held: true}, nil
	}
	var res app.ProviderResult
	for _, it := range prep.Items {
		if it.Status == domain.ItemSettled || !it.Gross.IsPositive() {
			continue
		}
		tax, err := a.computeTax(ctx, app.TaxInput{
			CycleID: in.CycleID, ProviderID: in.ProviderID, Currency: it.Currency, Gross: it.Gross,
			CommissionRate: prep.CommissionRate,
			IdempotencyKey: domain.SettlementKey(in.CycleID, in.ProviderID, it.Currency),
		})
		if err != nil {
			return res, step("tax of "+it.Currency, err)
		}
		post := app.PostInput{CycleID: in.CycleID, ProviderID: in.ProviderID, Split: tax.Split}
		posted, err := a.PostSettlement(ctx, post)
		if err != nil {
			return res, step("post settlement of "+it.Currency, err)
		}
		if err := a.finalizeSettlement(ctx, app.FinalizeInput{
			CycleID: in.CycleID, ProviderID: in.ProviderID, Tier: prep.Tier, Tax: tax,
			TransactionID: posted.TransactionID, SweepID: posted.SweepID,
		}); err != nil {
			return res, step("finalize "+it.Currency, err)
		}
		res.Settled = append(res.Settled, it.Currency)
	}
	return res, nil
}

// prepareProvider reads the provider's hold, tier (→ commission rate) and
// gross per currency.
func (a *Activities) prepareProvider(ctx context.Context, in app.ProviderInput) (app.Prepared, error) {
	held, tier, items, err := a.Store.Prepare(ctx, in.CycleID, in.ProviderID)
	if err != nil {
		return app.Prepared{}, err
	}
	if tier == "" {
		// No party.updated seen yet: the standard tier (DESIGN §5's
		// default tier for new providers).
		tier = split.TierStandard
	}
	rate, err := a.Commission.Rate(tier)
	if err != nil {
		return app.Prepared{}, nonRetryable(fmt.Errorf("commission of %s: %w", in.ProviderID, err))
	}
	p := app.Prepared{Held: held, Tier: tier, CommissionRate: rate}
	for _, it := range items {
		p.Items = append(p.Items, app.Item{Currency: it.Currency, Gross: it.Gross, Status: it.Status})
	}
	return p, nil
}

// computeTax asks the tax service to split gross and record the withholding
// (rule set and version from its rule table; idempotent on the key).
func (a *Activities) computeTax(ctx context.Context, in app.TaxInput) (app.TaxResult, error) {
	cur, err := money.Lookup(in.Currency)
	if err != nil {
		return app.TaxResult{}, nonRetryable(err)
	}
	resp, err := a.Tax.ComputeWithholding(ctx, &taxv1.ComputeWithholdingRequest{
		ProviderId: in.ProviderID, CycleId: in.CycleID, Currency: cur.Code,
		Gross: cur.Format(in.Gross), CommissionRate: in.CommissionRate.String(), IdempotencyKey: in.IdempotencyKey,
	})
	if err != nil {
		return app.TaxResult{}, grpcErr("compute withholding of "+in.ProviderID, err)
	}
	sp := domain.Split{Currency: cur.Code, Gross: in.Gross, CommissionRate: in.CommissionRate, Jurisdiction: resp.Jurisdiction}
	for _, f := range []struct {
		dst *decimal.Decimal
		s   string
	}{{&sp.Commission, resp.Commission}, {&sp.Tax, resp.TaxWithheld}, {&sp.Net, resp.Net}} {
		if *f.dst, err = money.ParseDecimal(f.s); err != nil {
			return app.TaxResult{}, nonRetryable(fmt.Errorf("tax service answer for %s: %w", in.ProviderID, err))
		}
	}
	if err := sp.Check(); err != nil {
		return app.TaxResult{}, nonRetryable(err)
	}
	return app.TaxResult{Split: sp, RuleSet: resp.RuleSet, RuleVersion: resp.RuleVersion, WithholdingID: resp.WithholdingId}, nil
}

// PostSettlement posts the provider's settlement and its commission sweep as
// ONE ledger transaction (DESIGN §4), so no report ever reads the commission
// earned but still in the client bank account: Dr
// provider:{id}:pending:{cycle} gross; Cr platform:revenue:commission,
// tax:withheld:{j}, provider:{id}:available net; Dr bank:operating, Cr
// bank:client the commission. Idempotent on the settlement key. It returns the
// transaction id and the id of the transaction that swept the commission (the
// same one; "" without a commission).
//
// A settlement posted before the sweep joined it (the same key, without the
// sweep legs) conflicts with the joint body: it is then replayed as it was and
// its sweep posted on its own key, as that code did.
func (a *Activities) PostSettlement(ctx context.Context, in app.PostInput) (app.Posted, error) {
	sp := in.Split
	if err := sp.Check(); err != nil {
		return app.Posted{}, nonRetryable(err)
	}
	cur, err := money.Lookup(sp.Currency)
	if err != nil {
		return app.Posted{}, nonRetryable(err)
	}
	settlement := postings(cur, domain.SettlementLegs(in.ProviderID, in.CycleID, sp))
	sweep := postings(cur, domain.SweepLegs(sp))
	req := &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: domain.SettlementKey(in.CycleID, in.ProviderID, cur.Code),
		Description:    fmt.Sprintf("settlement of %s for %s", in.ProviderID, in.CycleID),
		Metadata: map[string]string{
			"kind": "settlement", "cycle_id": in.CycleID, "provider_id": in.ProviderID,
			"commission_rate": sp.CommissionRate.String(), "jurisdiction": sp.Jurisdiction,
		},
		Postings: append(append([]*ledgerv1.Posting{}, settlement...), sweep...),
	}
	resp, err := a.Ledger.CreateTransaction(ctx, req)
	if code := status.Code(err); len(sweep) > 0 && (code == codes.Aborted || code == codes.AlreadyExists) {
		return a.postSettlementThenSweep(ctx, in, cur, req, settlement)
	}
	if err != nil {
		return app.Posted{}, grpcErr("post settlement of "+in.ProviderID, err)
	}
	out := app.Posted{TransactionID: resp.GetTransaction().GetTransactionId()}
	if len(sweep) > 0 {
		out.SweepID = out.TransactionID
	}
	return out, nil
}

// postSettlementThenSweep is the two-transaction settlement of earlier code,
// kept for a settlement it had begun: the settlement replayed under its key,
// then the sweep under its own.
func (a *Activities) postSettlementThenSweep(ctx context.Context, in app.PostInput, cur money.Currency,
	joint *ledgerv1.CreateTransactionRequest, settlement []*ledgerv1.Posting) (app.Posted, error) {
	old := proto.Clone(joint).(*ledgerv1.CreateTransactionRequest)
	old.Postings = settlement
	resp, err := a.Ledger.CreateTransaction(ctx, old)
	if err != nil {
		return app.Posted{}, grpcErr("post settlement of "+in.ProviderID, err)
	}
	sw, err := a.Ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: domain.SweepKey(in.CycleID, in.ProviderID, cur.Code),
		Description:    fmt.Sprintf("commission sweep of %s for %s", in.ProviderID, in.CycleID),
		Metadata:       map[string]string{"kind": "commission_sweep", "cycle_id": in.CycleID, "provider_id": in.ProviderID},
		Postings:       postings(cur, domain.SweepLegs(in.Split)),
	})
	if err != nil {
		return app.Posted{}, grpcErr("sweep commission of "+in.ProviderID, err)
	}
	return app.Posted{TransactionID: resp.GetTransaction().GetTransactionId(), SweepID: sw.GetTransaction().GetTransactionId()}, nil
}

// postings are legs as the ledger's API takes them, amounts formatted in cur.
func postings(cur money.Currency, legs []domain.Leg) []*ledgerv1.Posting {
	out := make([]*ledgerv1.Posting, 0, len(legs))
	for _, l := range legs {
		out = append(out, &ledgerv1.Posting{Account: l.Account, Direction: l.Direction, Amount: cur.Format(l.Amount), Currency: cur.Code})
	}
	return out
}

// finalizeSettlement writes the statement (with the charge lines behind the
// gross) and, in the same transaction, settlement.settled.{provider} for payout.
func (a *Activities) finalizeSettlement(ctx context.Context, in app.FinalizeInput) error {
	sp := in.Tax.Split
	lines, err := a.lines(ctx, in.ProviderID, in.CycleID, sp.Currency)
	if err != nil {
		return err
	}
	cur, err := money.Lookup(sp.Currency)
	if err != nil {
		return nonRetryable(err)
	}
	ev, err := proto.Marshal(&eventsv1.ProviderSettled{
		ProviderId: in.ProviderID, CycleId: in.CycleID, Currency: cur.Code,
		Gross: cur.Format(sp.Gross), Commission: cur.Format(sp.Commission), CommissionRate: sp.CommissionRate.String(),
		TaxWithheld: cur.Format(sp.Tax), Net: cur.Format(sp.Net), TransactionId: in.TransactionID, Jurisdiction: sp.Jurisdiction,
	})
	if err != nil {
		return err
	}
	return a.Store.Finalize(ctx, domain.Settled{
		CycleID: in.CycleID, ProviderID: in.ProviderID, Tier: in.Tier, Split: sp,
		RuleSet: in.Tax.RuleSet, RuleVersion: in.Tax.RuleVersion, WithholdingID: in.Tax.WithholdingID,
		TransactionID: in.TransactionID, SweepID: in.SweepID, Lines: lines,
	}, a.Clock.Now(), outbox.Message{
		ID:      "settled-" + domain.SettlementKey(in.CycleID, in.ProviderID, cur.Code),
		Subject: subjects.ProviderSettled.Of(in.ProviderID), Payload: ev,
	})
}

// lines returns the charges credited to the provider's pending account in
// the cycle, as statement lines (at most statementLinesMax).
func (a *Activities) lines(ctx context.Context, provider, cycle, currency string) ([]domain.Line, error) {
	account := domain.PendingAccount(provider, cycle)
	resp, err := a.Ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: account, PageSize: statementLinesMax})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, nil
		}
		return nil, grpcErr("list charges of "+provider, err)
	}
	var out []domain.Line
	for _, tx := range resp.Transactions {
		for _, p := range tx.Postings {
			if p.Account != account || p.Direction != "credit" || p.Currency != currency {
				continue
			}
			md := tx.Metadata
			out = append(out, domain.Line{
				TransactionID: tx.TransactionId, LeaseID: md["lease_id"], RenterID: md["renter_id"],
				GPUModel: md["gpu_model"], GPUHours: md["gpu_hours"], Amount: p.Amount, Description: tx.Description,
			})
		}
	}
	return out, nil
}
