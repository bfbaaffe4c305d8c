package app

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// The provider child's steps are local activities: each is short (one
// database or gRPC round trip), idempotent, and recorded as one marker, so a
// child costs a handful of history events and 100 000 of them close fast.
// Transient failures retry with backoff (the SDK moves long retries onto
// timers); business failures are non-retryable.
var providerActivity = workflow.LocalActivityOptions{
	StartToCloseTimeout:    30 * time.Second,
	ScheduleToCloseTimeout: 24 * time.Hour,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    500 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

// ProviderWorkflow is settle-{cycle}-{provider}: per currency, gross →
// commission by tier → tax (the tax service) → one ledger transaction → the
// commission sweep → statement and settlement.settled.{provider}. Held
// providers are left pending; a release starts this workflow again.
func ProviderWorkflow(ctx workflow.Context, in ProviderInput) (ProviderResult, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, providerActivity)
	var prep Prepared
	if err := workflow.ExecuteLocalActivity(ctx, ActPrepareProvider, in).Get(ctx, &prep); err != nil {
		return ProviderResult{}, fmt.Errorf("prepare %s: %w", in.ProviderID, err)
	}
	if prep.Held {
		return ProviderResult{Held: true}, nil
	}
	var res ProviderResult
	for _, it := range prep.Items {
		if it.Status == domain.ItemSettled || !it.Gross.IsPositive() {
			continue
		}
		var tax TaxResult
		if err := workflow.ExecuteLocalActivity(ctx, ActComputeTax, TaxInput{
			CycleID: in.CycleID, ProviderID: in.ProviderID, Currency: it.Currency, Gross: it.Gross,
			CommissionRate: prep.CommissionRate,
			IdempotencyKey: domain.SettlementKey(in.CycleID, in.ProviderID, it.Currency),
		}).Get(ctx, &tax); err != nil {
			return res, fmt.Errorf("tax of %s %s: %w", in.ProviderID, it.Currency, err)
		}
		post := PostInput{CycleID: in.CycleID, ProviderID: in.ProviderID, Split: tax.Split}
		var txID, sweepID string
		if err := workflow.ExecuteLocalActivity(ctx, ActPostSettlement, post).Get(ctx, &txID); err != nil {
			return res, fmt.Errorf("post settlement of %s %s: %w", in.ProviderID, it.Currency, err)
		}
		if err := workflow.ExecuteLocalActivity(ctx, ActSweepCommission, post).Get(ctx, &sweepID); err != nil {
			return res, fmt.Errorf("sweep commission of %s %s: %w", in.ProviderID, it.Currency, err)
		}
		if err := workflow.ExecuteLocalActivity(ctx, ActFinalizeSettlement, FinalizeInput{
			CycleID: in.CycleID, ProviderID: in.ProviderID, Tier: prep.Tier, Tax: tax,
			TransactionID: txID, SweepID: sweepID,
		}).Get(ctx, nil); err != nil {
			return res, fmt.Errorf("finalize %s %s: %w", in.ProviderID, it.Currency, err)
		}
		res.Settled = append(res.Settled, it.Currency)
	}
	return res, nil
}
