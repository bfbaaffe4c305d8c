package settlement

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// The invoice schedule's workflow asks the ledger for the month before the
// one it fired in (in the tax zone), not before that month's end plus the
// slack, and retries a failing ledger: fired at 01:00 on 1 Nov in Shanghai
// (17:00 UTC on 31 Oct) it issues 2026-10 at once; fired early (23:59 on
// 31 Oct there, a manual trigger) it issues 2026-09, October not being over.
func TestInvoicesMonthlyWorkflow(t *testing.T) {
	t.Parallel()
	sh := taxperiod.Default().Location()
	tests := []struct {
		name       string
		fired      time.Time
		scheduled  time.Time // the schedule's nominal time (TemporalScheduledStartTime); zero: a run by hand
		wantPeriod string
		wantAt     time.Time
	}{
		{"01:00 on the 1st", time.Date(2026, 11, 1, 1, 0, 0, 0, sh), time.Time{}, "2026-10", time.Date(2026, 11, 1, 1, 0, 0, 0, sh)},
		{"a minute after midnight", time.Date(2026, 11, 1, 0, 1, 0, 0, sh), time.Time{}, "2026-10", time.Date(2026, 11, 1, 0, 0, 0, 0, sh).Add(app.InvoicePeriodEndSlack)},
		{"before the month's end", time.Date(2026, 10, 31, 23, 59, 0, 0, sh), time.Time{}, "2026-09", time.Date(2026, 10, 31, 23, 59, 0, 0, sh)},
		// Caught up after Temporal was down over the 1st: the month the
		// schedule meant, not the one it started in (2026-12, and
		// November never invoiced).
		{"caught up on 5 January for 1 December", time.Date(2027, 1, 5, 3, 0, 0, 0, sh), time.Date(2026, 12, 1, 1, 0, 0, 0, sh),
			"2026-11", time.Date(2027, 1, 5, 3, 0, 0, 0, sh)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := newTestEnv(&suite)
			env.RegisterWorkflowWithOptions(app.Invoices{Periods: taxperiod.Default()}.MonthlyWorkflow,
				workflow.RegisterOptions{Name: app.InvoicesMonthlyWorkflowName})
			calls := 0
			var gotPeriod string
			var calledAt time.Time
			env.RegisterActivityWithOptions(func(_ context.Context, period string) (app.IssueResult, error) {
				calls++
				if calls == 1 {
					return app.IssueResult{}, errors.New("ledger unavailable") // transient: retried
				}
				gotPeriod, calledAt = period, env.Now()
				return app.IssueResult{Period: period, Issued: 3}, nil
			}, activity.RegisterOptions{Name: app.ActIssueInvoices})
			env.SetStartTime(tt.fired)
			if !tt.scheduled.IsZero() {
				sa := temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime").ValueSet(tt.scheduled))
				if err := env.SetTypedSearchAttributesOnStart(sa); err != nil {
					t.Fatal(err)
				}
			}
			env.ExecuteWorkflow(app.InvoicesMonthlyWorkflowName)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var res app.IssueResult
			if err := env.GetWorkflowResult(&res); err != nil || res.Issued != 3 || calls != 2 {
				t.Fatalf("result %+v, %v, %d calls", res, err, calls)
			}
			if gotPeriod != tt.wantPeriod {
				t.Fatalf("issued %s, want %s", gotPeriod, tt.wantPeriod)
			}
			// The retry comes a second or so after the first call.
			if calledAt.Before(tt.wantAt) || calledAt.After(tt.wantAt.Add(10*time.Second)) {
				t.Fatalf("issued at %s, want at %s (plus the retry's backoff)", calledAt, tt.wantAt)
			}
		})
	}
}
