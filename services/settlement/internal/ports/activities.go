// Package ports holds settlement's edges: the Temporal activities the
// workflows call, the gRPC handlers, and the party read-model consumer.
package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Error types of business failures (non-retryable).
const (
	errTypeInvalid = "InvalidSettlement"
)

// Activities are the settlement activities: settlement.Register registers
// each under its app.Act* name. Each hands its input to app.Steps (or
// app.PageSettler) and turns an app.Rejected failure into a non-retryable
// one; PostSettlement and the other steps of SettleProvider are not
// activities of their own.
type Activities struct {
	Steps     *app.Steps
	Temporal  client.Client    // to start the next cycle's workflow
	Page      *app.PageSettler // SettleProviders (its runner: WorkflowRunner)
	TaskQueue string
	Calendar  cycles.Calendar
	Clock     clock.Clock
	Log       *slog.Logger
	BatchSize int // providers per cycle run (app.CycleInput.BatchSize)
	Window    int // provider workflows in flight per page (app.CycleInput.Window)
}

// activityErr is err as the activity fails with it: an app.Rejected
// failure is non-retryable (the SDK reads only the outermost error when it
// records the failure), anything else is retried.
func activityErr(err error) error {
	if err != nil && app.IsRejected(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), errTypeInvalid, err)
	}
	return err
}

// EnsureCycle records the cycle (open) and returns its status.
func (a *Activities) EnsureCycle(ctx context.Context, cycleID string) (app.CycleInfo, error) {
	info, err := a.Steps.EnsureCycle(ctx, cycleID)
	return info, activityErr(err)
}

// StartNextCycle starts the workflow of the cycle after cycleID (idempotent).
func (a *Activities) StartNextCycle(ctx context.Context, cycleID string) error {
	cy, err := a.Calendar.Parse(cycleID)
	if err != nil {
		return activityErr(app.Rejected(err))
	}
	return StartCycleWorkflow(ctx, a.Temporal, a.TaskQueue, a.Calendar.Next(cy), a.BatchSize, a.Window)
}

// StartCycleWorkflow starts settle-{cycle} waiting for the cycle's close,
// unless a run is running (closing twice changes nothing). A run that has
// ended is started again: for a settled cycle it ends at once; for a
// closing one it settles the providers still pending (a run that failed,
// was terminated, or left providers failed); for an open one it waits for
// its close again (a terminated run left it open for good). batch and
// window are app.CycleInput's BatchSize and Window.
func StartCycleWorkflow(ctx context.Context, tc client.Client, queue string, cy cycles.Cycle, batch, window int) error {
	_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       domain.CycleWorkflowID(cy.ID),
		TaskQueue:                queue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, app.CycleWorkflowName, cycleInput(cy, batch, window))
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return fmt.Errorf("start %s: %w", domain.CycleWorkflowID(cy.ID), err)
	}
	return nil
}

// RerunCycleWorkflow runs a closing cycle's settlement again: the run of
// settle-{cycle} in flight gets a rerun signal (app.SignalRerun: another
// pass over the providers still pending once its pass is done; joined
// alone, the pass under way never returned to a provider that had failed
// on an earlier page), and without one a run is started (it settles what
// is pending). reason is logged by the run.
func RerunCycleWorkflow(ctx context.Context, tc client.Client, queue string, cy cycles.Cycle, batch, window int, reason string) error {
	_, err := tc.SignalWithStartWorkflow(ctx, domain.CycleWorkflowID(cy.ID), app.SignalRerun, app.RerunSignal{Reason: reason},
		client.StartWorkflowOptions{
			ID:                    domain.CycleWorkflowID(cy.ID),
			TaskQueue:             queue,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		}, app.CycleWorkflowName, cycleInput(cy, batch, window))
	if err != nil {
		return fmt.Errorf("rerun %s: %w", domain.CycleWorkflowID(cy.ID), err)
	}
	return nil
}

func cycleInput(cy cycles.Cycle, batch, window int) app.CycleInput {
	return app.CycleInput{CycleID: cy.ID, ClosesAt: cy.Closes, BatchSize: batch, Window: window}
}

// StartCycles (re)starts settle-{cycle} for each of the cycles given and
// each cycle settlement has recorded and not settled, and returns their
// workflow ids (sorted): a closing cycle's is rerun (RerunCycleWorkflow),
// any other's started unless running (StartCycleWorkflow); each call is
// idempotent. A cycle not settled that the calendar does not cut fails it
// (app.Rejected), after the others are started. reason is logged by the
// runs rerun.
func (a *Activities) StartCycles(ctx context.Context, base []cycles.Cycle, reason string) ([]string, error) {
	unsettled, err := a.Steps.Store.UnsettledCycles(ctx)
	if err != nil {
		return nil, fmt.Errorf("unsettled cycles: %w", err)
	}
	todo := map[string]cycles.Cycle{}
	for _, cy := range base {
		todo[cy.ID] = cy
	}
	closing := map[string]bool{}
	var uncut error
	for _, c := range unsettled {
		closing[c.CycleID] = c.Status == domain.CycleClosing
		if _, ok := todo[c.CycleID]; ok {
			continue
		}
		cy, err := a.Calendar.Parse(c.CycleID)
		if err != nil {
			// A cycle settlement knows and has not settled that the
			// configured calendar does not cut (GPUBILL_CYCLE_DAYS or
			// _ANCHOR changed): skipped with a warning, its providers'
			// pending earnings never settled, and the cycle stayed open
			// with no alert.
			uncut = errors.Join(uncut, fmt.Errorf("cycle %s is not settled and the configured calendar (GPUBILL_CYCLE_ANCHOR %s, GPUBILL_CYCLE_DAYS %d) "+
				"does not cut it: %v; start settlement with the calendar that cut it",
				c.CycleID, a.Calendar.Anchor.Format(time.DateOnly), a.Calendar.LengthDays, err))
			continue
		}
		todo[cy.ID] = cy
	}
	ids := make([]string, 0, len(todo))
	for id := range todo {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		if closing[id] {
			err = RerunCycleWorkflow(ctx, a.Temporal, a.TaskQueue, todo[id], a.BatchSize, a.Window, reason)
		} else {
			err = StartCycleWorkflow(ctx, a.Temporal, a.TaskQueue, todo[id], a.BatchSize, a.Window)
		}
		if err != nil {
			return nil, err
		}
		ids[i] = domain.CycleWorkflowID(id)
	}
	if uncut != nil {
		return ids, app.Rejected(uncut)
	}
	return ids, nil
}

// BeginClose marks the cycle closing, closes it in the ledger (new charges
// go to the next open cycle) and publishes settlement.cycle.closed.{cycle}.
func (a *Activities) BeginClose(ctx context.Context, in app.BeginCloseInput) error {
	return activityErr(a.Steps.BeginClose(ctx, in))
}

// SnapshotCycle records the cycle's gross per provider and currency from
// the ledger (app.Steps.SnapshotCycle), heartbeating the next page's token
// and resuming a retry from the last one recorded.
func (a *Activities) SnapshotCycle(ctx context.Context, cycleID string) (int, error) {
	token := ""
	if activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &token); err != nil {
			// Start over: recording a page twice writes the same rows.
			activity.GetLogger(ctx).Warn("snapshot: heartbeat page token unreadable; starting from the first page", "cycle", cycleID, "err", err)
			token = ""
		}
	}
	n, err := a.Steps.SnapshotCycle(ctx, cycleID, token, func(next string) { activity.RecordHeartbeat(ctx, next) })
	return n, activityErr(err)
}

// NextProviders returns the next batch of providers to settle.
func (a *Activities) NextProviders(ctx context.Context, in app.NextProvidersInput) ([]string, error) {
	ids, err := a.Steps.NextProviders(ctx, in)
	return ids, activityErr(err)
}

// CompleteCycle marks the cycle settled once every provider of it is, and
// reports whether it is settled.
func (a *Activities) CompleteCycle(ctx context.Context, cycleID string) (bool, error) {
	settled, err := a.Steps.CompleteCycle(ctx, cycleID)
	return settled, activityErr(err)
}

// SettleProvider is the provider workflow's one local activity
// (app.Steps.SettleProvider).
func (a *Activities) SettleProvider(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error) {
	res, err := a.Steps.SettleProvider(ctx, in)
	return res, activityErr(err)
}
