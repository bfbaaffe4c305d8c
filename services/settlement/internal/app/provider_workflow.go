package app

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The provider workflow's work is ONE local activity (ActSettleProviderSteps: hold
// and tier → per currency tax, the ledger transaction, the commission sweep,
// the statement and settlement.settled), each step idempotent on keys
// derived from the workflow id, so a retry or a replay redoes nothing. The
// workflow's history is six events (started, one workflow task, one marker,
// completed): a Temporal server's cost per provider is mostly per event and
// per persisted transition, and 100 000 of them close fast. Transient
// failures retry with backoff (the SDK moves long retries onto timers);
// business failures are non-retryable.
var providerActivity = workflow.LocalActivityOptions{
	StartToCloseTimeout:    time.Minute,
	ScheduleToCloseTimeout: 24 * time.Hour,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    500 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

// ProviderWorkflow is settle-{cycle}-{provider}: per currency, gross →
// commission by tier → tax (the tax service) → one ledger transaction → the
// commission sweep → statement and settlement.settled.{provider}, all in the
// ActSettleProviderSteps local activity. Held providers are left pending; a
// release starts this workflow again.
func ProviderWorkflow(ctx workflow.Context, in ProviderInput) (ProviderResult, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, providerActivity)
	steps := ActSettleProviderSteps
	if in.Version < ProviderVersionSteps {
		steps = ActSettleProviderLegacy
	}
	var res ProviderResult
	if err := workflow.ExecuteLocalActivity(ctx, steps, in).Get(ctx, &res); err != nil {
		return res, fmt.Errorf("settle %s: %w", in.ProviderID, err)
	}
	if in.CompleteCycle && !res.Held {
		// A release's run: the cycle's workflow may have ended long
		// before, and the release's caller may have stopped waiting (a
		// ledger slow or down): nothing else would mark the cycle settled.
		var settled bool
		if err := workflow.ExecuteLocalActivity(ctx, ActCompleteCycle, in.CycleID).Get(ctx, &settled); err != nil {
			return res, fmt.Errorf("complete %s after settling %s: %w", in.CycleID, in.ProviderID, err)
		}
	}
	return res, nil
}
