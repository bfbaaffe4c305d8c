package settlement

import (
	"context"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// TestRecordScheduledHistories records a completed run of InvoicesMonthly
// and of LedgerReconciliationDaily on a real Temporal dev server for
// TestReplayRecordedHistories (testdata/invoices_monthly_history.json,
// reconciliation_daily_history.json). Their activities are stubs: the
// history holds the workflow's commands, not the ledger's work. Skipped
// unless GPUBILL_RECORD_HISTORY=1; needs bin/temporal.
func TestRecordScheduledHistories(t *testing.T) {
	if os.Getenv("GPUBILL_RECORD_HISTORY") != "1" {
		t.Skip("records histories only with GPUBILL_RECORD_HISTORY=1")
	}
	tc := dialTemporal(t, testkit.NewTemporal(t))
	const queue = "settlement-record-scheduled"
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(app.Invoices{Periods: taxperiod.Default()}.MonthlyWorkflow,
		workflow.RegisterOptions{Name: app.InvoicesMonthlyWorkflowName})
	w.RegisterWorkflowWithOptions(app.ReconciliationDailyWorkflow,
		workflow.RegisterOptions{Name: app.ReconciliationDailyWorkflowName})
	w.RegisterActivityWithOptions(func(_ context.Context, period string) (app.IssueResult, error) {
		return app.IssueResult{Period: period, Issued: 2, AlreadyIssued: 1}, nil
	}, activity.RegisterOptions{Name: app.ActIssueInvoices})
	w.RegisterActivityWithOptions(func(context.Context) ([]app.ReconciliationSummary, error) {
		return []app.ReconciliationSummary{{ReconciliationID: "r-1", Currency: "CNY", Verdict: "matched", Matched: 3}}, nil
	}, activity.RegisterOptions{Name: app.ActRunReconciliation})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	for _, run := range []struct{ workflow, id, file string }{
		{app.InvoicesMonthlyWorkflowName, "record-invoices-monthly", "invoices_monthly_history.json"},
		{app.ReconciliationDailyWorkflowName, "record-reconciliation-daily", "reconciliation_daily_history.json"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		wr, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: run.id, TaskQueue: queue}, run.workflow)
		if err == nil {
			err = wr.Get(ctx, nil)
		}
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", run.workflow, err)
		}
		writeHistory(t, tc, run.file, wr.GetID(), wr.GetRunID())
	}
}
