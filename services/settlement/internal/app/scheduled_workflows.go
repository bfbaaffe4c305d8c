package app

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Workflows started by Temporal Schedules (ports.EnsureSchedules).
const (
	// CycleOpenerWorkflowName ensures settle-{cycle} exists for the current
	// and the next cycle (schedule settlement-cycle-opener, daily).
	CycleOpenerWorkflowName = "SettlementCycleOpener"
	// RemittanceMonthlyWorkflowName runs on the 1st of each month
	// (schedule tax-remittance-monthly) and starts RemittanceWorkflow as
	// remit-{previous month}.
	RemittanceMonthlyWorkflowName = "TaxRemittanceMonthly"
	// RemittanceWorkflowName is remit-{YYYY-MM}: the tax service's RemitTax
	// for one month.
	RemittanceWorkflowName = "TaxRemittance"
)

// Activity names of the scheduled workflows.
const (
	ActEnsureCycleWorkflows = "EnsureCycleWorkflows"
	ActRemitTax             = "RemitTax"
)

// RemittanceZone is the zone of the monthly remittance schedule (02:00 on
// the 1st): the month remitted is the one before the schedule's fire time
// there. China has no daylight saving time, so a fixed offset is exact and
// keeps workflow code free of the host's tz database.
var RemittanceZone = time.FixedZone("Asia/Shanghai", 8*60*60)

// RemittancePeriodEndSlack is waited past the tax service's period end
// (tax periods are UTC months, RemitTax refuses a month that has not ended
// on its clock) to absorb clock skew between Temporal and the tax service.
const RemittancePeriodEndSlack = time.Minute

var (
	scheduledRetry = &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    5 * time.Minute,
	}
	openerActivity = workflow.ActivityOptions{
		StartToCloseTimeout:    time.Minute,
		ScheduleToCloseTimeout: time.Hour,
		RetryPolicy:            scheduledRetry,
	}
	remitActivity = workflow.ActivityOptions{
		StartToCloseTimeout:    5 * time.Minute,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            scheduledRetry,
	}
)

// RemittanceInput is remit-{period}'s input.
type RemittanceInput struct {
	Period string // YYYY-MM
}

// Remittance is one payment to a tax authority (per jurisdiction and
// currency). Amounts are decimal strings as the tax API formats them.
type Remittance struct {
	RemittanceID  string
	Jurisdiction  string
	Currency      string
	Amount        string
	Status        string
	TransactionID string
}

// RemittanceLine is one line of the report: tax remitted per jurisdiction,
// currency and provider.
type RemittanceLine struct {
	Jurisdiction string
	Currency     string
	ProviderID   string
	TaxWithheld  string
	Withholdings int
}

// RemittanceReport is RemitTax's answer, the result of remit-{period}.
type RemittanceReport struct {
	Period      string
	Remittances []Remittance
	Lines       []RemittanceLine
}

// RemittanceWorkflowID is the workflow id of a month's remittance.
func RemittanceWorkflowID(period string) string { return "remit-" + period }

// PreviousMonth returns the calendar month (YYYY-MM) before t's month in
// RemittanceZone.
func PreviousMonth(t time.Time) string {
	l := t.In(RemittanceZone)
	return time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, RemittanceZone).AddDate(0, -1, 0).Format("2006-01")
}

// CycleOpenerWorkflow ensures the workflows of the current and the next
// cycle exist (their ids are deterministic; an existing one is left alone)
// and returns their ids.
func CycleOpenerWorkflow(ctx workflow.Context) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, openerActivity)
	var ids []string
	if err := workflow.ExecuteActivity(ctx, ActEnsureCycleWorkflows).Get(ctx, &ids); err != nil {
		return nil, fmt.Errorf("ensure cycle workflows: %w", err)
	}
	return ids, nil
}

// RemittanceMonthlyWorkflow remits the month before the one it was started
// in (RemittanceZone) as the child remit-{period}, and returns its report.
// A remit-{period} already running is left to finish (empty report).
func RemittanceMonthlyWorkflow(ctx workflow.Context) (RemittanceReport, error) {
	period := PreviousMonth(workflow.GetInfo(ctx).WorkflowStartTime)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            RemittanceWorkflowID(period),
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, // a re-run remits nothing twice
		WorkflowRunTimeout:    48 * time.Hour,
	})
	var rep RemittanceReport
	err := workflow.ExecuteChildWorkflow(cctx, RemittanceWorkflowName, RemittanceInput{Period: period}).Get(ctx, &rep)
	var already *temporal.ChildWorkflowExecutionAlreadyStartedError
	if errors.As(err, &already) {
		workflow.GetLogger(ctx).Info("remittance already running", "period", period)
		return RemittanceReport{Period: period}, nil
	}
	return rep, err
}

// RemittanceWorkflow is remit-{period}: once the month has ended for the
// tax service (UTC), RemitTax for it. RemitTax is idempotent per period
// (remittance ids, and the ledger keys, are rem-{period}-{j}-{currency}),
// so running it again changes nothing and answers the same report.
func RemittanceWorkflow(ctx workflow.Context, in RemittanceInput) (RemittanceReport, error) {
	start, err := time.Parse("2006-01", in.Period)
	if err != nil {
		return RemittanceReport{}, temporal.NewNonRetryableApplicationError("period: want YYYY-MM", "InvalidPeriod", err)
	}
	if wait := start.AddDate(0, 1, 0).Add(RemittancePeriodEndSlack).Sub(workflow.Now(ctx)); wait > 0 {
		if err := workflow.Sleep(ctx, wait); err != nil {
			return RemittanceReport{}, err
		}
	}
	ctx = workflow.WithActivityOptions(ctx, remitActivity)
	var rep RemittanceReport
	if err := workflow.ExecuteActivity(ctx, ActRemitTax, in.Period).Get(ctx, &rep); err != nil {
		return rep, fmt.Errorf("remit tax of %s: %w", in.Period, err)
	}
	return rep, nil
}
