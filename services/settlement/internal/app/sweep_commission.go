package app

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// The deferred commission sweeps (PostSettlement defers a sweep bank:client
// cannot fund): schedule settlement-commission-sweep fires hourly and runs
// CommissionSweepWorkflowName, whose one activity sweeps what bank:client
// can fund now. A sweep still refused waits for the next run; its
// commission is counted, with its age, in gpubill_settlement_commission_unswept
// (alert GpubillCommissionSweepDeferred).
const (
	CommissionSweepWorkflowName = "SettlementCommissionSweep"
	ActSweepCommission          = "SweepCommission"
)

// unsweptBatchMax bounds the settlements one run tries to sweep; the
// oldest go first and the next run takes the rest.
const unsweptBatchMax = 500

var sweepActivity = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Minute,
	ScheduleToCloseTimeout: time.Hour,
	RetryPolicy:            scheduledRetry,
}

// SweepSummary is what one run did: settlements swept, and those whose
// sweep bank:client still cannot fund.
type SweepSummary struct {
	Swept, Deferred int
}

// CommissionSweepWorkflow sweeps the deferred commissions bank:client can
// fund now.
func CommissionSweepWorkflow(ctx workflow.Context) (SweepSummary, error) {
	ctx = workflow.WithActivityOptions(ctx, sweepActivity)
	var out SweepSummary
	if err := workflow.ExecuteActivity(ctx, ActSweepCommission).Get(ctx, &out); err != nil {
		return out, fmt.Errorf("sweep commission: %w", err)
	}
	return out, nil
}

// SweepCommission posts the deferred sweeps, oldest first, each under its
// sweep key (a replay after a crash posts nothing twice) and records it on
// the statement. Only statements with a commission and no sweep are
// listed: a settlement that carried its sweep (the joint form) names it as
// its sweep and is never swept again. A sweep the ledger refuses
// (bank:client still cannot fund it) is left for the next run; any other
// error ends the run, to be retried.
func (s *Steps) SweepCommission(ctx context.Context) (SweepSummary, error) {
	us, err := s.Store.UnsweptCommission(ctx, unsweptBatchMax)
	if err != nil {
		return SweepSummary{}, err
	}
	var out SweepSummary
	for _, u := range us {
		id, err := s.postSweep(ctx, u)
		if IsRejected(err) && !IsConflict(err) {
			out.Deferred++
			continue
		}
		if err != nil {
			return out, fmt.Errorf("sweep of %s %s %s: %w", u.CycleID, u.ProviderID, u.Currency, err)
		}
		if err := s.Store.RecordSweep(ctx, u, id); err != nil {
			return out, err
		}
		out.Swept++
	}
	return out, nil
}
