package app

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/pkg/taxperiod"
)

// InvoicesMonthlyWorkflowName runs on the 1st of each month in the tax zone
// (schedule invoices-monthly) and has the ledger issue the month before's
// renter invoices.
const InvoicesMonthlyWorkflowName = "InvoicesMonthly"

// ActIssueInvoices is the activity asking the ledger to issue a month's
// invoices (idempotent per renter, currency and month).
const ActIssueInvoices = "IssueInvoices"

// InvoicePeriodEndSlack is waited past the month's end before issuing; the
// ledger refuses a month until a minute after its end.
const InvoicePeriodEndSlack = 2 * time.Minute

var issueActivity = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Minute,
	ScheduleToCloseTimeout: 72 * time.Hour,
	RetryPolicy:            scheduledRetry,
}

// IssueResult is the ledger's answer for a month.
type IssueResult struct {
	Period        string
	Issued        int
	AlreadyIssued int
}

// Invoices holds the invoice workflow and the calendar its months are in
// (the tax zone, GPUBILL_TAX_TIMEZONE, as the ledger's invoices).
type Invoices struct {
	Periods taxperiod.Calendar
}

// MonthlyWorkflow (InvoicesMonthly) issues the invoices of the month before
// the one it was meant to start in (NominalStart), once that month has ended plus
// InvoicePeriodEndSlack. Running it again for a month issues nothing new.
func (iv Invoices) MonthlyWorkflow(ctx workflow.Context) (IssueResult, error) {
	p := iv.Periods.Previous(NominalStart(ctx))
	if wait := p.End.Add(InvoicePeriodEndSlack).Sub(workflow.Now(ctx)); wait > 0 {
		if err := workflow.Sleep(ctx, wait); err != nil {
			return IssueResult{}, err
		}
	}
	ctx = workflow.WithActivityOptions(ctx, issueActivity)
	var res IssueResult
	if err := workflow.ExecuteActivity(ctx, ActIssueInvoices, p.ID).Get(ctx, &res); err != nil {
		return res, fmt.Errorf("issue invoices of %s: %w", p.ID, err)
	}
	return res, nil
}
