package ports

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	filterpb "go.temporal.io/api/filter/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// WorkflowRunner runs settle-{cycle}-{provider} on Temporal: the
// production app.ProviderRunner.
type WorkflowRunner struct {
	Temporal  client.Client
	TaskQueue string
}

// StartProvider starts (or joins) the provider's workflow.
func (r WorkflowRunner) StartProvider(ctx context.Context, in app.ProviderInput) error {
	_, err := StartProviderWorkflow(ctx, r.Temporal, r.TaskQueue, in)
	return err
}

// ProviderOutcome describes the provider's latest workflow run.
func (r WorkflowRunner) ProviderOutcome(ctx context.Context, in app.ProviderInput) (bool, app.ProviderResult, error) {
	var res app.ProviderResult
	id := domain.ProviderWorkflowID(in.CycleID, in.ProviderID)
	d, err := r.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return false, res, fmt.Errorf("describe %s: %w", id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	switch st := info.GetStatus(); st {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return true, res, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		if err := r.Temporal.GetWorkflow(ctx, id, info.GetExecution().GetRunId()).Get(ctx, &res); err != nil {
			return false, res, fmt.Errorf("result of %s: %w", id, err)
		}
		return false, res, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		// The failure's cause (a ledger's or tax service's refusal) is
		// in the run's result: the page logs it with the provider.
		runID := info.GetExecution().GetRunId()
		err := r.runFailure(ctx, id, runID)
		if r.failedAsBefore(ctx, id, runID, err) {
			return false, res, fmt.Errorf("%w: %s ended %s %w: %w", app.ErrProviderFailed, id, st, app.ErrFailedAsBefore, err)
		}
		return false, res, fmt.Errorf("%w: %s ended %s: %w", app.ErrProviderFailed, id, st, err)
	default:
		return false, res, fmt.Errorf("%w: %s ended %s", app.ErrProviderFailed, id, st)
	}
}

// runFailure is the failure a run of id ended with.
func (r WorkflowRunner) runFailure(ctx context.Context, id, runID string) error {
	if err := r.Temporal.GetWorkflow(ctx, id, runID).Get(ctx, nil); err != nil {
		return err
	}
	return errors.New("no failure recorded")
}

// previousRunsPage is how many closed runs of a provider's workflow
// failedAsBefore lists: the one that failed now and the one before it
// (the list may not show the one that failed now yet).
const previousRunsPage = 2

// failedAsBefore reports whether the run of id closed last before runID
// failed with failure's cause: a rerun of the cycle meeting a failure
// logged already. Temporal keeps closed runs for the namespace's retention
// (the chart's 30 days, the dev server's 72 h; the daily opener reruns
// every day). Any doubt (no
// earlier run, one that did not fail, Temporal not answering) answers
// false, and the failure is logged at ERROR. Only a failed run asks.
func (r WorkflowRunner) failedAsBefore(ctx context.Context, id, runID string, failure error) bool {
	list, err := r.Temporal.ListClosedWorkflow(ctx, &workflowservice.ListClosedWorkflowExecutionsRequest{
		MaximumPageSize: previousRunsPage,
		Filters: &workflowservice.ListClosedWorkflowExecutionsRequest_ExecutionFilter{
			ExecutionFilter: &filterpb.WorkflowExecutionFilter{WorkflowId: id}},
	})
	if err != nil {
		return false
	}
	for _, prev := range list.GetExecutions() { // closed last first
		if prev.GetExecution().GetRunId() == runID {
			continue
		}
		if prev.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
			return false
		}
		return runCause(r.runFailure(ctx, id, prev.GetExecution().GetRunId())) == runCause(failure)
	}
	return false
}

// runCause is a run's failure without the header naming its run
// (*temporal.WorkflowExecutionError): what two runs that failed alike
// share.
func runCause(err error) string {
	var run *temporal.WorkflowExecutionError
	if errors.As(err, &run) && run.Unwrap() != nil {
		return run.Unwrap().Error()
	}
	return err.Error()
}

// StartProviderWorkflow starts settle-{cycle}-{provider}, or joins the run
// in flight (a release and a cycle page never settle a provider twice at
// once). A completed run is started again: a held provider's run completes
// held, and a release runs it once more; every step of a run is idempotent,
// so a run after a settled one settles nothing new. The start is eager: the
// first workflow task comes back in the start response and runs on this
// client's worker when it has a free slot (one round trip to the server
// instead of three).
func StartProviderWorkflow(ctx context.Context, tc client.Client, queue string, in app.ProviderInput) (client.WorkflowRun, error) {
	in.Version = app.ProviderVersionCurrent
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       domain.ProviderWorkflowID(in.CycleID, in.ProviderID),
		TaskQueue:                queue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowRunTimeout:       24 * time.Hour,
		EnableEagerStart:         true,
	}, app.ProviderWorkflowName, in)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", domain.ProviderWorkflowID(in.CycleID, in.ProviderID), err)
	}
	return run, nil
}

// SettleProviders settles one page of a cycle's providers
// (app.PageSettler.Settle), heartbeating the counts so far.
func (a *Activities) SettleProviders(ctx context.Context, in app.SettleProvidersInput) (app.SettleProvidersResult, error) {
	return a.Page.Settle(ctx, in, func(r app.SettleProvidersResult) { activity.RecordHeartbeat(ctx, r) })
}
