package settlement

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// The daily opener workflow is its one activity.
func TestCycleOpenerWorkflow(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := newTestEnv(&suite)
	env.RegisterWorkflowWithOptions(app.CycleOpenerWorkflow, workflow.RegisterOptions{Name: app.CycleOpenerWorkflowName})
	calls := 0
	env.RegisterActivityWithOptions(func(context.Context) ([]string, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("temporal unavailable") // transient: retried
		}
		return []string{"settle-a", "settle-b"}, nil
	}, activity.RegisterOptions{Name: app.ActEnsureCycleWorkflows})
	env.ExecuteWorkflow(app.CycleOpenerWorkflowName)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := env.GetWorkflowResult(&ids); err != nil || len(ids) != 2 || calls != 2 {
		t.Fatalf("ids %v, err %v, calls %d", ids, err, calls)
	}
}

// The daily reconciliation workflow is its one activity, retried when the
// ledger is unreachable; a refusal (a business error) fails it at once.
func TestReconciliationDailyWorkflow(t *testing.T) {
	t.Parallel()
	run := func(act func(context.Context) ([]app.ReconciliationSummary, error)) *testsuite.TestWorkflowEnvironment {
		var suite testsuite.WorkflowTestSuite
		env := newTestEnv(&suite)
		env.RegisterWorkflowWithOptions(app.ReconciliationDailyWorkflow, workflow.RegisterOptions{Name: app.ReconciliationDailyWorkflowName})
		env.RegisterActivityWithOptions(act, activity.RegisterOptions{Name: app.ActRunReconciliation})
		env.ExecuteWorkflow(app.ReconciliationDailyWorkflowName)
		return env
	}
	calls := 0
	env := run(func(context.Context) ([]app.ReconciliationSummary, error) {
		if calls++; calls == 1 {
			return nil, errors.New("ledger unavailable")
		}
		return []app.ReconciliationSummary{{ReconciliationID: "rec_1", Currency: "CNY", Verdict: "reconciled", Matched: 3}}, nil
	})
	var got []app.ReconciliationSummary
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if err := env.GetWorkflowResult(&got); err != nil || calls != 2 || len(got) != 1 || got[0].ReconciliationID != "rec_1" || got[0].Matched != 3 {
		t.Fatalf("result %+v, err %v, calls %d; want rec_1 after a retry", got, err, calls)
	}
	calls = 0
	env = run(func(context.Context) ([]app.ReconciliationSummary, error) {
		calls++
		return nil, temporal.NewNonRetryableApplicationError("refused", "InvalidSettlement", nil)
	})
	if err := env.GetWorkflowError(); err == nil || calls != 1 {
		t.Fatalf("err %v after %d calls; want a failure after 1", err, calls)
	}
}

// remitEnv is a test environment with the remittance workflows on the
// default tax calendar (Asia/Shanghai months) and a stub RemitTax activity.
func remitEnv(t *testing.T, remit func(ctx context.Context, period string) (app.RemittanceReport, error)) *testsuite.TestWorkflowEnvironment {
	return remitEnvIn(t, taxperiod.Default(), remit)
}

func remitEnvIn(t *testing.T, periods taxperiod.Calendar, remit func(ctx context.Context, period string) (app.RemittanceReport, error)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := newTestEnv(&suite)
	rem := app.Remittances{Periods: periods}
	env.RegisterWorkflowWithOptions(rem.MonthlyWorkflow, workflow.RegisterOptions{Name: app.RemittanceMonthlyWorkflowName})
	env.RegisterWorkflowWithOptions(rem.RemitWorkflow, workflow.RegisterOptions{Name: app.RemittanceWorkflowName})
	env.RegisterActivityWithOptions(remit, activity.RegisterOptions{Name: app.ActRemitTax})
	return env
}

// Fired at 02:00 Asia/Shanghai on 1 Nov (18:00 UTC on 31 Oct), the monthly
// workflow remits October as remit-2026-10 at once (October ended in
// Shanghai two hours before, at 16:00 UTC), and returns the report.
func TestRemittanceMonthlyWorkflow(t *testing.T) {
	t.Parallel()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	fired := time.Date(2026, 11, 1, 2, 0, 0, 0, shanghai)
	var gotPeriod, gotID string
	var calledAt time.Time // workflow time (the activity's StartedTime is the wall clock)
	var env *testsuite.TestWorkflowEnvironment
	env = remitEnv(t, func(ctx context.Context, period string) (app.RemittanceReport, error) {
		gotPeriod, gotID, calledAt = period, activity.GetInfo(ctx).WorkflowExecution.ID, env.Now()
		return app.RemittanceReport{Period: period, Remittances: []app.Remittance{{RemittanceID: "rem-" + period + "-CN-CNY", Amount: "12.34", Status: "remitted"}}}, nil
	})
	env.SetStartTime(fired)
	env.ExecuteWorkflow(app.RemittanceMonthlyWorkflowName)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var rep app.RemittanceReport
	if err := env.GetWorkflowResult(&rep); err != nil {
		t.Fatal(err)
	}
	if gotPeriod != "2026-10" || gotID != "remit-2026-10" || rep.Period != "2026-10" || len(rep.Remittances) != 1 || rep.Remittances[0].Amount != "12.34" {
		t.Fatalf("period %q in %q, report %+v", gotPeriod, gotID, rep)
	}
	if periodEnd := time.Date(2026, 11, 1, 0, 0, 0, 0, shanghai); calledAt.Before(periodEnd) {
		t.Fatalf("RemitTax called at %s, before the period ended (%s)", calledAt, periodEnd)
	}
	if waited := calledAt.Sub(fired); waited > app.RemittancePeriodEndSlack {
		t.Fatalf("RemitTax called at %s, %s after the schedule fired; October had ended in Shanghai", calledAt, waited)
	}
}

// A monthly run Temporal caught up after an outage over the 1st (started
// on 5 January for 1 December) remits the month the schedule meant,
// November; from its own start it remitted December, November's
// withholdings with them under December's period.
func TestRemittanceMonthlyWorkflowCaughtUp(t *testing.T) {
	t.Parallel()
	sh := taxperiod.Default().Location()
	var gotPeriod string
	env := remitEnv(t, func(_ context.Context, period string) (app.RemittanceReport, error) {
		gotPeriod = period
		return app.RemittanceReport{Period: period}, nil
	})
	env.SetStartTime(time.Date(2027, 1, 5, 3, 0, 0, 0, sh))
	sa := temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime").ValueSet(time.Date(2026, 12, 1, 2, 0, 0, 0, sh)))
	if err := env.SetTypedSearchAttributesOnStart(sa); err != nil {
		t.Fatal(err)
	}
	env.ExecuteWorkflow(app.RemittanceMonthlyWorkflowName)
	if err := env.GetWorkflowError(); err != nil || gotPeriod != "2026-11" {
		t.Fatalf("remitted %q (%v), want 2026-11", gotPeriod, err)
	}
}

// remit-{period} started before its month has ended in the tax zone waits
// for the end plus RemittancePeriodEndSlack, then remits; a run recorded
// before tax periods had a zone (the change's DefaultVersion) keeps waiting
// for the end of the UTC month.
func TestRemittanceWorkflowWaitsForPeriodEnd(t *testing.T) {
	t.Parallel()
	utc, err := taxperiod.New("UTC")
	if err != nil {
		t.Fatal(err)
	}
	slack := app.RemittancePeriodEndSlack
	tests := []struct {
		name       string
		periods    taxperiod.Calendar
		oldVersion bool
		start      time.Time
		want       time.Time
	}{
		{"Shanghai month, started 20:00 on 30 Nov there", taxperiod.Default(), false,
			time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC).Add(slack)},
		{"Shanghai month, started 02:00 on 1 Dec there", taxperiod.Default(), false,
			time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC)},
		{"UTC month", utc, false,
			time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(slack)},
		{"history before the zone", taxperiod.Default(), true,
			time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(slack)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calledAt time.Time
			var env *testsuite.TestWorkflowEnvironment
			env = remitEnvIn(t, tt.periods, func(_ context.Context, period string) (app.RemittanceReport, error) {
				calledAt = env.Now()
				return app.RemittanceReport{Period: period}, nil
			})
			if tt.oldVersion {
				env.OnGetVersion("tax-period-zone", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			env.SetStartTime(tt.start)
			env.ExecuteWorkflow(app.RemittanceWorkflowName, app.RemittanceInput{Period: "2026-11"})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if calledAt.Before(tt.want) || calledAt.Sub(tt.want) > time.Second {
				t.Fatalf("RemitTax called at %s, want %s", calledAt.UTC(), tt.want)
			}
		})
	}
}

// A business failure (the tax service refuses) fails remit-{period} at
// once; a transient one is retried.
func TestRemittanceWorkflowRetries(t *testing.T) {
	t.Parallel()
	t.Run("business failure not retried", func(t *testing.T) {
		calls := 0
		env := remitEnv(t, func(context.Context, string) (app.RemittanceReport, error) {
			calls++
			return app.RemittanceReport{}, temporal.NewNonRetryableApplicationError("period has not ended", "InvalidSettlement", nil)
		})
		env.SetStartTime(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
		env.ExecuteWorkflow(app.RemittanceWorkflowName, app.RemittanceInput{Period: "2026-10"})
		if err := env.GetWorkflowError(); err == nil || calls != 1 {
			t.Fatalf("err %v after %d calls, want a failure after 1", err, calls)
		}
	})
	t.Run("transient failure retried", func(t *testing.T) {
		calls := 0
		env := remitEnv(t, func(_ context.Context, period string) (app.RemittanceReport, error) {
			calls++
			if calls < 3 {
				return app.RemittanceReport{}, errors.New("tax unavailable")
			}
			return app.RemittanceReport{Period: period}, nil
		})
		env.SetStartTime(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
		env.ExecuteWorkflow(app.RemittanceWorkflowName, app.RemittanceInput{Period: "2026-10"})
		if err := env.GetWorkflowError(); err != nil || calls != 3 {
			t.Fatalf("err %v after %d calls, want success after 3", err, calls)
		}
	})
	t.Run("bad period", func(t *testing.T) {
		env := remitEnv(t, func(context.Context, string) (app.RemittanceReport, error) { return app.RemittanceReport{}, nil })
		env.ExecuteWorkflow(app.RemittanceWorkflowName, app.RemittanceInput{Period: "october"})
		if err := env.GetWorkflowError(); err == nil {
			t.Fatal("bad period accepted")
		}
	})
}

// workflowExists reports whether a workflow id has an execution.
func workflowExists(t *testing.T, tc client.Client, id string) bool {
	t.Helper()
	_, err := tc.DescribeWorkflowExecution(context.Background(), id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false
	}
	if err != nil {
		t.Fatalf("describe %s: %v", id, err)
	}
	return true
}

// On a real dev server: start-up creates the schedules (a second start-up
// updates them in place); the opener ran once at creation, so the current
// and the next cycle's workflows exist; once the calendar has moved into
// the next cycle, triggering the opener creates the workflow of the cycle
// after it.
func TestSchedulesAtStartup(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.s.noStartup = false
	now := time.Now().UTC()
	f.clock.Set(now) // cycles in the future: their workflows wait on timers
	runWorker(t, f.s)
	ctx := context.Background()
	sc := tc.ScheduleClient()

	cur := cal.At(now)
	next := cal.Next(cur)
	after := cal.Next(next)
	testkit.Eventually(t, 60*time.Second, func() bool {
		d, err := sc.GetHandle(ctx, ports.ScheduleCycleOpener).Describe(ctx)
		return err == nil && len(d.Info.RecentActions) > 0 && workflowExists(t, tc, domain.CycleWorkflowID(next.ID))
	}, "opener schedule ran once at creation")
	if !workflowExists(t, tc, domain.CycleWorkflowID(cur.ID)) {
		t.Fatalf("no workflow for the current cycle %s", cur.ID)
	}
	d, err := sc.GetHandle(ctx, ports.ScheduleRemittanceMonthly).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Schedule.Spec.TimeZoneName != "Asia/Shanghai" || len(d.Info.NextActionTimes) == 0 {
		t.Fatalf("remittance schedule spec %+v, next %v", d.Schedule.Spec, d.Info.NextActionTimes)
	}
	if n := d.Info.NextActionTimes[0].In(taxperiod.Default().Location()); n.Day() != 1 || n.Hour() != 2 || n.Minute() != 0 {
		t.Fatalf("next remittance at %s, want 02:00 on the 1st in Asia/Shanghai", n)
	}
	// Every missed month runs, one after the other (skipped, the second
	// of two 1sts caught up at once was lost).
	if d.Schedule.Policy == nil || d.Schedule.Policy.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL {
		t.Fatalf("remittance schedule policy %+v, want overlap BUFFER_ALL", d.Schedule.Policy)
	}
	d, err = sc.GetHandle(ctx, ports.ScheduleInvoicesMonthly).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Info.NextActionTimes[0].In(taxperiod.Default().Location()); n.Day() != 1 || n.Hour() != 1 || n.Minute() != 0 {
		t.Fatalf("next invoicing at %s, want 01:00 on the 1st in Asia/Shanghai", n)
	}
	if d.Schedule.Policy == nil || d.Schedule.Policy.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL {
		t.Fatalf("invoice schedule policy %+v, want overlap BUFFER_ALL", d.Schedule.Policy)
	}
	d, err = sc.GetHandle(ctx, ports.ScheduleReconciliation).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Info.NextActionTimes[0].In(taxperiod.Default().Location()); n.Hour() != 6 || n.Minute() != 0 || time.Until(n) > 24*time.Hour {
		t.Fatalf("next reconciliation at %s, want the next 06:00 in Asia/Shanghai", n)
	}
	// Start-up again: the schedules exist and are updated in place, their
	// overlap policy too (one made by an earlier version skipped).
	if err := sc.GetHandle(ctx, ports.ScheduleInvoicesMonthly).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.ensureSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := sc.GetHandle(ctx, ports.ScheduleInvoicesMonthly).Describe(ctx); err != nil || d.Schedule.Policy.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL {
		t.Fatalf("invoice schedule updated at start-up: %+v, %v; want overlap BUFFER_ALL", d, err)
	}

	if workflowExists(t, tc, domain.CycleWorkflowID(after.ID)) {
		t.Fatalf("%s exists before the calendar reached %s", after.ID, next.ID)
	}
	f.clock.Set(next.Start.Add(time.Hour))
	if err := sc.GetHandle(ctx, ports.ScheduleCycleOpener).Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, func() bool { return workflowExists(t, tc, domain.CycleWorkflowID(after.ID)) },
		"the triggered opener started the next cycle's workflow")
	recordOpenerHistory(t, tc)
}

// A cycle whose run ended before its close (terminated, failed, or
// cancelled while it waited) is started again by the daily opener once
// the calendar has moved past it, and its close then settles it; meanwhile
// gpubill_settlement_open_past_close_seconds counts how long it has been
// open past its close. The opener started only the current and the next
// cycle's workflows: the cycle stayed open for good, its providers'
// earnings pending, and no gauge or alert showed it.
func TestOpenerRestartsACycleWhoseRunEndedBeforeItsClose(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tc := newEnvClient()
	f.s.tc, f.s.api.Temporal, f.s.acts.Temporal = tc, tc, tc
	const providers = 2
	f.seed(t, cycle1.ID, providers)
	ctx := context.Background()

	// settle-{cycle1} records its cycle open and waits for its close; an
	// hour in, it ends.
	var suite testsuite.WorkflowTestSuite
	env := newTestEnv(&suite)
	env.SetStartTime(startAt)
	Register(env, f.s.acts, f.s.d.TaxPeriods)
	env.OnActivity(app.ActStartNextCycle, mock.Anything, mock.Anything).Return(nil)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
	env.ExecuteWorkflow(app.CycleWorkflowName, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes})
	if err := env.GetWorkflowError(); !temporal.IsCanceledError(err) {
		t.Fatalf("cycle run ended with %v, want cancelled", err)
	}
	if st := cycleStatus(t, f); st != domain.CycleOpen {
		t.Fatalf("cycle %s after its run ended, want open", st)
	}
	// The gauge reads the database's clock (the machine's), long past
	// cycle1's close.
	want := time.Since(cycle1.Closes).Seconds()
	if want < 3600 {
		t.Fatalf("the machine's clock is %s, not past %s's close by an hour: the gauge's check proves nothing", time.Now(), cycle1.ID)
	}
	if got := openPastClose(t, f); got < want-60 || got > want+60 {
		t.Errorf("open_past_close_seconds = %.0f with %s open since its close %s, want %.0f", got, cycle1.ID, cycle1.Closes, want)
	}

	f.clock.Set(cycle1.Closes.Add(24 * time.Hour)) // the next day's opener
	ids, err := f.s.acts.EnsureCycleWorkflows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, ok := tc.started(domain.CycleWorkflowID(cycle1.ID))
	if !ok {
		t.Fatalf("the opener started %v, not %s, whose cycle is open past its close", ids, domain.CycleWorkflowID(cycle1.ID))
	}
	runCycle(t, f, in, nil)
	if st := cycleStatus(t, f); st != domain.CycleSettled {
		t.Fatalf("cycle %s after the run the opener started, want settled", st)
	}
	for i := range providers {
		p := fmt.Sprintf("p-%05d", i)
		if b := f.ledger.Balance(domain.PendingAccount(p, cycle1.ID), "CNY"); !b.IsZero() {
			t.Errorf("%s pending = %s, want 0", p, b)
		}
	}
	if got := openPastClose(t, f); got != 0 {
		t.Errorf("open_past_close_seconds = %v with no cycle open, want 0", got)
	}
}

// openPastClose reads gpubill_settlement_open_past_close_seconds as a
// scrape does.
func openPastClose(t *testing.T, f *fixture) float64 {
	t.Helper()
	for _, m := range Metrics() {
		if m.Name != "gpubill_settlement_open_past_close_seconds" {
			continue
		}
		var v float64
		if err := f.s.d.Pool.QueryRow(context.Background(), m.Query).Scan(&v); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		return v
	}
	t.Error("no metric gpubill_settlement_open_past_close_seconds")
	return -1
}
