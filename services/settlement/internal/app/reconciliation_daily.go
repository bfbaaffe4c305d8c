package app

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// The daily bank reconciliation: schedule ledger-reconciliation-daily fires
// at 06:00 in the tax zone and runs ReconciliationDailyWorkflowName, whose
// one activity asks the ledger to reconcile every currency with an
// imported statement (the ledger keeps the runs; this workflow only
// triggers them).
const (
	ReconciliationDailyWorkflowName = "LedgerReconciliationDaily"
	ActRunReconciliation            = "RunReconciliation"
)

var reconActivity = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Minute,
	ScheduleToCloseTimeout: 6 * time.Hour,
	RetryPolicy:            scheduledRetry,
}

// ReconciliationSummary is one run the ledger made: its counts, never its
// items (GET /v1/reconciliations/{id} has them), so the activity's result
// stays small however many items a run holds.
type ReconciliationSummary struct {
	ReconciliationID    string
	Currency            string
	Verdict             string
	Matched             int
	UnmatchedInBank     int
	UnmatchedInLedger   int // outstanding ones included
	OutstandingInLedger int
	StatementBreaks     int
	CashDifferences     int
}

// ReconciliationDailyWorkflow runs the ledger's reconciliation of every
// currency with a statement and returns what each run found.
func ReconciliationDailyWorkflow(ctx workflow.Context) ([]ReconciliationSummary, error) {
	ctx = workflow.WithActivityOptions(ctx, reconActivity)
	var out []ReconciliationSummary
	if err := workflow.ExecuteActivity(ctx, ActRunReconciliation).Get(ctx, &out); err != nil {
		return nil, fmt.Errorf("run reconciliation: %w", err)
	}
	return out, nil
}
