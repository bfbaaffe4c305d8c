package ports

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// Schedule ids.
const (
	ScheduleCycleOpener       = "settlement-cycle-opener"
	ScheduleRemittanceMonthly = "tax-remittance-monthly"
	ScheduleInvoicesMonthly   = "invoices-monthly"
	ScheduleReconciliation    = "ledger-reconciliation-daily"
	ScheduleCommissionSweep   = "settlement-commission-sweep"
)

// commissionSweepEvery is how often the deferred commission sweeps are
// tried again: a sweep waits at most this long once bank:client can fund it.
const commissionSweepEvery = time.Hour

// EnsureCycleWorkflows (the daily opener) starts settle-{cycle} for the
// current and the next cycle and, as settlement's start-up does, for every
// cycle not settled (StartCycles: a closing cycle's settlement is run
// again; idempotent: an existing or completed workflow is success), and
// returns their workflow ids. A cycle whose run ended before its close was
// otherwise never closed once the calendar had moved past it. A run alive
// but stuck is joined, not replaced (GpubillSettlementCycleNotClosed).
func (a *Activities) EnsureCycleWorkflows(ctx context.Context) ([]string, error) {
	cur := a.Calendar.At(a.Clock.Now())
	ids, err := a.StartCycles(ctx, []cycles.Cycle{cur, a.Calendar.Next(cur)}, "daily opener")
	return ids, activityErr(err)
}

// RemitTax asks the tax service to remit the month (idempotent per period)
// and returns its report.
func (a *Activities) RemitTax(ctx context.Context, period string) (app.RemittanceReport, error) {
	rep, err := a.Steps.RemitTax(ctx, period)
	return rep, activityErr(err)
}

// IssueInvoices asks the ledger to issue a month's renter invoices
// (idempotent: what is issued stays as it is).
func (a *Activities) IssueInvoices(ctx context.Context, period string) (app.IssueResult, error) {
	res, err := a.Steps.IssueInvoices(ctx, period)
	return res, activityErr(err)
}

// RunReconciliation asks the ledger to reconcile every currency with an
// imported statement (each run is kept by the ledger). Its key is the
// workflow's id, one per scheduled run (the schedule names it by its
// nominal time): a retry of the activity answers the runs an earlier try
// stored instead of storing new ones.
func (a *Activities) RunReconciliation(ctx context.Context) ([]app.ReconciliationSummary, error) {
	out, err := a.Steps.RunReconciliation(ctx, activity.GetInfo(ctx).WorkflowExecution.ID)
	return out, activityErr(err)
}

// SweepCommission posts the deferred commission sweeps bank:client can fund
// now (each idempotent on its sweep key) and records them on the statements.
func (a *Activities) SweepCommission(ctx context.Context) (app.SweepSummary, error) {
	out, err := a.Steps.SweepCommission(ctx)
	return out, activityErr(err)
}

// monthlyOverlap is the monthly schedules' policy: every missed month runs,
// one after the other. Caught up after Temporal was down over two 1sts,
// both actions are due at once, and skipping the second while the first
// ran lost that month's invoices and remittance.
const monthlyOverlap = enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL

// backfillSince is what a calendar schedule created at now runs at once:
// every action it would have taken since start (in the tax zone), each at
// its nominal time. Temporal runs no schedule for a time before the
// schedule was created: created on a new Temporal (a restore, README
// "Backups and restore") at 10:00 on the 1st, the monthly schedules next
// ran a month later, and the month before was never invoiced nor its
// withheld tax remitted. A schedule that exists already is not
// backfilled: Temporal catches its own outages up.
func backfillSince(start, now time.Time, overlap enumspb.ScheduleOverlapPolicy) []client.ScheduleBackfill {
	if !now.After(start) {
		return nil
	}
	return []client.ScheduleBackfill{{Start: start, End: now, Overlap: overlap}}
}

// monthlyBackfillFrom is where the monthly schedules created at now start
// their backfill: the 1st 00:00 of the month before now's, in the tax
// zone. From the 1st of now's month, a snapshot older than that 1st (backed
// up on 31 December, restored on 2 February) lost the 1st of the month
// before's runs: December never invoiced nor remitted. Both runs are
// idempotent per month (issuing a month again issues nothing new, remitting
// it again posts nothing twice), so the month whose runs did happen before
// the snapshot is run again for nothing. A snapshot older still leaves its
// months to GpubillInvoicesNotIssued and GpubillTaxMonthNotRemitted. Not
// from the month after the last completed run: settlement would ask the
// ledger and the tax service at its start-up, and one of them down then
// would fail or shorten the backfill.
func monthlyBackfillFrom(taxPeriods taxperiod.Calendar, now time.Time) time.Time {
	return taxPeriods.Previous(now).Start
}

// Schedules returns settlement's Temporal Schedules: the daily cycle
// opener (also run once at creation) and the monthly tax remittance (1st of
// each month, 02:00 in the tax zone: the month before has ended there, so
// remit-{period} proceeds at once), the monthly renter invoices (1st of
// each month, 01:00 in the tax zone) and the daily bank reconciliation
// (06:00 in the tax zone), and the hourly deferred commission sweep.
// Created at now, the monthly schedules run at once what they would have
// run since the 1st 00:00 of the month before in the tax zone
// (monthlyBackfillFrom); the opener runs at creation, the sweep within the
// hour, the reconciliation at its next 06:00 (not backfilled: a run at
// every start-up past 06:00 took statements and runs from under whoever
// reconciled then, and a day without one opens GpubillReconciliationNotRun;
// finance runs one on demand).
func Schedules(queue string, taxPeriods taxperiod.Calendar, now time.Time) []client.ScheduleOptions {
	monthlyFrom := monthlyBackfillFrom(taxPeriods, now)
	return []client.ScheduleOptions{{
		ID:   ScheduleCycleOpener,
		Spec: client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: 24 * time.Hour}}},
		Action: &client.ScheduleWorkflowAction{
			ID: ScheduleCycleOpener, Workflow: app.CycleOpenerWorkflowName, TaskQueue: queue,
			WorkflowExecutionTimeout: 2 * time.Hour,
		},
		Overlap:            enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		TriggerImmediately: true,
	}, {
		ID: ScheduleRemittanceMonthly,
		Spec: client.ScheduleSpec{
			Calendars: []client.ScheduleCalendarSpec{{
				Second: []client.ScheduleRange{{Start: 0}}, Minute: []client.ScheduleRange{{Start: 0}},
				Hour: []client.ScheduleRange{{Start: 2}}, DayOfMonth: []client.ScheduleRange{{Start: 1}},
				Month: []client.ScheduleRange{{Start: 1, End: 12}}, DayOfWeek: []client.ScheduleRange{{Start: 0, End: 6}},
			}},
			TimeZoneName: taxPeriods.Location().String(),
		},
		Action: &client.ScheduleWorkflowAction{
			ID: ScheduleRemittanceMonthly, Workflow: app.RemittanceMonthlyWorkflowName, TaskQueue: queue,
			WorkflowExecutionTimeout: 72 * time.Hour,
		},
		Overlap:          monthlyOverlap,
		ScheduleBackfill: backfillSince(monthlyFrom, now, monthlyOverlap),
	}, {
		ID: ScheduleInvoicesMonthly,
		Spec: client.ScheduleSpec{
			Calendars: []client.ScheduleCalendarSpec{{
				Second: []client.ScheduleRange{{Start: 0}}, Minute: []client.ScheduleRange{{Start: 0}},
				Hour: []client.ScheduleRange{{Start: 1}}, DayOfMonth: []client.ScheduleRange{{Start: 1}},
				Month: []client.ScheduleRange{{Start: 1, End: 12}}, DayOfWeek: []client.ScheduleRange{{Start: 0, End: 6}},
			}},
			TimeZoneName: taxPeriods.Location().String(),
		},
		Action: &client.ScheduleWorkflowAction{
			ID: ScheduleInvoicesMonthly, Workflow: app.InvoicesMonthlyWorkflowName, TaskQueue: queue,
			WorkflowExecutionTimeout: 96 * time.Hour,
		},
		Overlap:          monthlyOverlap,
		ScheduleBackfill: backfillSince(monthlyFrom, now, monthlyOverlap),
	}, {
		ID: ScheduleReconciliation,
		Spec: client.ScheduleSpec{
			Calendars: []client.ScheduleCalendarSpec{{
				Second: []client.ScheduleRange{{Start: 0}}, Minute: []client.ScheduleRange{{Start: 0}},
				Hour: []client.ScheduleRange{{Start: 6}}, DayOfMonth: []client.ScheduleRange{{Start: 1, End: 31}},
				Month: []client.ScheduleRange{{Start: 1, End: 12}}, DayOfWeek: []client.ScheduleRange{{Start: 0, End: 6}},
			}},
			TimeZoneName: taxPeriods.Location().String(),
		},
		Action: &client.ScheduleWorkflowAction{
			ID: ScheduleReconciliation, Workflow: app.ReconciliationDailyWorkflowName, TaskQueue: queue,
			WorkflowExecutionTimeout: 12 * time.Hour,
		},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	}, {
		ID:   ScheduleCommissionSweep,
		Spec: client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: commissionSweepEvery}}},
		Action: &client.ScheduleWorkflowAction{
			ID: ScheduleCommissionSweep, Workflow: app.CommissionSweepWorkflowName, TaskQueue: queue,
			WorkflowExecutionTimeout: 2 * time.Hour,
		},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	}}
}

// EnsureSchedules creates settlement's schedules at now, with what each
// would have run since its backfill's start (Schedules; the backfill is
// part of the create request: a start-up that stops after it leaves no
// schedule without it), or updates the spec, action and overlap policy of one that
// exists (its state, pause and history are kept; nothing is backfilled).
func EnsureSchedules(ctx context.Context, tc client.Client, queue string, taxPeriods taxperiod.Calendar, now time.Time) error {
	sc := tc.ScheduleClient()
	for _, o := range Schedules(queue, taxPeriods, now) {
		_, err := sc.Create(ctx, o)
		if err == nil {
			continue
		}
		if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
			return fmt.Errorf("create schedule %s: %w", o.ID, err)
		}
		spec, action := o.Spec, o.Action
		if err := sc.GetHandle(ctx, o.ID).Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				s := in.Description.Schedule
				s.Spec, s.Action = &spec, action
				if s.Policy != nil {
					s.Policy.Overlap = o.Overlap
				}
				return &client.ScheduleUpdate{Schedule: &s}, nil
			},
		}); err != nil {
			return fmt.Errorf("update schedule %s: %w", o.ID, err)
		}
	}
	return nil
}
