package app

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/pkg/taxperiod"
)

// Workflows started by Temporal Schedules (ports.EnsureSchedules).
const (
	// CycleOpenerWorkflowName ensures settle-{cycle} exists for the current
	// and the next cycle and every cycle not settled (schedule
	// settlement-cycle-opener, daily).
	CycleOpenerWorkflowName = "SettlementCycleOpener"
	// RemittanceMonthlyWorkflowName runs on the 1st of each month in the
	// tax zone (schedule tax-remittance-monthly) and starts
	// RemittanceWorkflowName as remit-{previous month}.
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

// RemittancePeriodEndSlack is waited past the tax service's period end
// (tax periods are calendar months in the tax zone, taxperiod; RemitTax
// refuses a month that has not ended on its clock) to absorb clock skew
// between Temporal and the tax service.
const RemittancePeriodEndSlack = time.Minute

// Version of remit-{period}'s wait (workflow.GetVersion): DefaultVersion
// runs (started before tax periods had a zone) wait for the end of the UTC
// month; versionTaxZone runs wait for the end of the month in the tax zone,
// which has passed when the schedule fires at 02:00 on the 1st there.
const (
	changeTaxZone  = "tax-period-zone"
	versionTaxZone = 1
)

// Remittances holds the remittance workflows and the tax period calendar
// they run on: the monthly schedule fires at 02:00 on the 1st in its zone
// and remits the month before. It must be the tax service's calendar
// (GPUBILL_TAX_TIMEZONE, default Asia/Shanghai). The calendar is fixed for
// a worker's life, which keeps the workflows deterministic; change the zone
// only while no remit-{period} is waiting.
type Remittances struct {
	Periods taxperiod.Calendar
}

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

// RemittanceReport is RemitTax's answer, the result of remit-{period}:
// remittances and counts, not the lines per provider (~160 B each as JSON:
// 15 000 providers made 2.37 MB, over Temporal's 2 MiB result limit, and
// remit-{period} failed for good after the tax service had posted the
// remittances).
type RemittanceReport struct {
	Period      string
	Remittances []Remittance
	// WithholdingsNotPosted is how many withholdings recorded before the
	// period's end were left out because the ledger has not posted their
	// settlement (remitted by a later run once it has).
	WithholdingsNotPosted int
	// LineCount is how many lines (per remittance and provider) the report
	// has: GET /v1/tax-remittances/{remittance_id}/lines pages them.
	LineCount int
}

// RemittanceWorkflowID is the workflow id of a month's remittance.
func RemittanceWorkflowID(period string) string { return "remit-" + period }

// CycleOpenerWorkflow ensures the workflows of the current and the next
// cycle and of every cycle not settled exist (their ids are deterministic;
// an existing one is left alone, a closing cycle's asked to run its
// settlement again) and returns their ids.
func CycleOpenerWorkflow(ctx workflow.Context) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, openerActivity)
	var ids []string
	if err := workflow.ExecuteActivity(ctx, ActEnsureCycleWorkflows).Get(ctx, &ids); err != nil {
		return nil, fmt.Errorf("ensure cycle workflows: %w", err)
	}
	return ids, nil
}

// scheduledStartKey is the search attribute Temporal sets on a schedule's
// runs: when the schedule meant the run to start.
var scheduledStartKey = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")

// NominalStart is when a scheduled run was meant to start, or when a run
// started by hand started. A run Temporal caught up after an outage over a
// 1st (or a backfill) starts later: from its own start time both the
// invoices and the remittance of December's 1st, run on 5 January, took
// December, and November's were never made. A run that had begun before
// (DefaultVersion in its history) keeps its start time: replayed with the
// nominal one, its child's id would differ from the one it started.
func NominalStart(ctx workflow.Context) time.Time {
	if workflow.GetVersion(ctx, changeNominalStart, workflow.DefaultVersion, versionNominalStart) == workflow.DefaultVersion {
		return workflow.GetInfo(ctx).WorkflowStartTime
	}
	if t, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(scheduledStartKey); ok && !t.IsZero() {
		return t
	}
	return workflow.GetInfo(ctx).WorkflowStartTime
}

// Version of the monthly runs' month (workflow.GetVersion): DefaultVersion
// runs take the month before their start, versionNominalStart runs the one
// before the time their schedule meant.
const (
	changeNominalStart  = "nominal-start"
	versionNominalStart = 1
)

// MonthlyWorkflow (TaxRemittanceMonthly) remits the tax period before the
// one it was meant to start in (NominalStart) as the child remit-{period}, and returns its
// report. A remit-{period} already running is left to finish (empty
// report).
func (r Remittances) MonthlyWorkflow(ctx workflow.Context) (RemittanceReport, error) {
	period := r.Periods.Previous(NominalStart(ctx)).ID
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

// RemitWorkflow (TaxRemittance) is remit-{period}: once the month has
// ended for the tax service (in the tax zone, plus RemittancePeriodEndSlack),
// RemitTax for it. RemitTax is idempotent per period (remittance ids, and
// the ledger keys, are rem-{period}-{j}-{currency}), so running it again
// posts nothing new, unless a remittance's ledger transaction was reversed
// since: that one is marked reversed and its tax remitted again under a
// new id (rem-{period}-{j}-{currency}-2).
func (r Remittances) RemitWorkflow(ctx workflow.Context, in RemittanceInput) (RemittanceReport, error) {
	p, err := r.Periods.Parse(in.Period)
	if err != nil {
		return RemittanceReport{}, temporal.NewNonRetryableApplicationError("period: want YYYY-MM", "InvalidPeriod", err)
	}
	end := p.End
	if workflow.GetVersion(ctx, changeTaxZone, workflow.DefaultVersion, versionTaxZone) == workflow.DefaultVersion {
		end = time.Date(p.Start.Year(), p.Start.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	if wait := end.Add(RemittancePeriodEndSlack).Sub(workflow.Now(ctx)); wait > 0 {
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
