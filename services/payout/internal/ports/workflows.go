package ports

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// starterIdle is how often the starter looks for payouts without a workflow
// when nothing nudged it (a crash between a payout's commit and its start,
// a retry, a payout written by an older version).
const starterIdle = 2 * time.Second

// Workflows starts and wakes payout workflows.
type Workflows struct {
	Store    app.Store
	Temporal client.Client
	Queue    string
	Timing   app.Timing
	Log      *slog.Logger
	nudge    chan struct{}
}

// NewWorkflows returns a starter ready to Run.
func NewWorkflows(st app.Store, tc client.Client, queue string, t app.Timing, log *slog.Logger) *Workflows {
	return &Workflows{Store: st, Temporal: tc, Queue: queue, Timing: t, Log: log, nudge: make(chan struct{}, 1)}
}

// Nudge makes Run look for unstarted payouts now.
func (w *Workflows) Nudge() {
	select {
	case w.nudge <- struct{}{}:
	default:
	}
}

// Run starts payout-{id} for every payout whose workflow is not started,
// until ctx ends. A payout row is written first and its workflow started
// after, so a crash in between only delays the start.
func (w *Workflows) Run(ctx context.Context) error {
	for {
		if err := w.startAll(ctx); err != nil && ctx.Err() == nil {
			w.Log.Warn("start payout workflows", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.nudge:
		case <-time.After(starterIdle):
		}
	}
}

func (w *Workflows) startAll(ctx context.Context) error {
	for {
		unstarted, err := w.Store.Unstarted(ctx)
		if err != nil || len(unstarted) == 0 {
			return err
		}
		started := make([]app.PayoutAttempt, 0, len(unstarted))
		var firstErr error
		for _, a := range unstarted {
			err := w.start(ctx, a)
			if err == nil {
				started = append(started, a)
			} else if firstErr == nil {
				firstErr = err
			}
		}
		// The attempts read, not their payouts: a payout retried since
		// (another replica started its attempt, which failed, and finance
		// retried it) stays unstarted for the next pass.
		if err := w.Store.SetWorkflowStarted(ctx, started); err != nil {
			return err
		}
		if firstErr != nil {
			return firstErr
		}
	}
}

// start starts payout-{id} for attempt a. A run already going counts as
// started for a first attempt (if a retry came since, the mark of attempt
// 1 does not cover it); for a retry the previous run is finishing, so try
// again. The SDK answers a running workflow's handle without an
// error unless told otherwise, which would mark a retry started while only
// its previous run was: it would then stay created for ever.
func (w *Workflows) start(ctx context.Context, a app.PayoutAttempt) error {
	_, err := w.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: domain.WorkflowIDOn(w.Queue, a.ID), TaskQueue: w.Queue,
		WorkflowExecutionErrorWhenAlreadyStarted: true},
		app.WorkflowName, app.Input{PayoutID: a.ID, Timing: w.Timing})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) && a.Attempt <= 1 {
		return nil
	}
	return err
}

// Wake signals payout-{id}; a workflow that is not running is not an error
// (the starter or the next poll will see the change).
func (w *Workflows) Wake(ctx context.Context, ids ...string) {
	for _, id := range ids {
		err := w.Temporal.SignalWorkflow(ctx, domain.WorkflowIDOn(w.Queue, id), "", app.SignalWake, nil)
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			w.Log.Warn("wake payout workflow", "payout_id", id, "err", err)
		}
	}
}

// WakeProvider wakes the workflows of a provider's payouts waiting at the
// gate (its KYC, method or hold changed).
func (w *Workflows) WakeProvider(ctx context.Context, provider string) {
	ids, err := w.Store.WaitingIDs(ctx, provider)
	if err != nil {
		w.Log.Warn("wake payouts of provider", "provider_id", provider, "err", err)
		return
	}
	w.Wake(ctx, ids...)
}

// RailCallback is the rail's asynchronous notification: it wakes the
// payout's workflow, which queries the rail (the callback carries nothing
// the workflow must trust).
func (w *Workflows) RailCallback(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := w.Store.PayoutByReference(ctx, ref)
	if err != nil {
		return // not recorded yet: the submitting activity's answer or a poll catches up
	}
	w.Wake(ctx, id)
}

// railNewsTimeout bounds one notification's database read and Temporal call.
const railNewsTimeout = 10 * time.Second

// RailNews is a rail's news about a reference that may come after the
// payout's workflow ended (a bank return days after it was paid): it
// wakes the workflow, or starts it again (signal-with-start), and the
// workflow follows the rail from the payout's status.
func (w *Workflows) RailNews(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), railNewsTimeout)
	defer cancel()
	id, err := w.Store.PayoutByReference(ctx, ref)
	if err != nil {
		w.Log.Warn("rail news for a reference no payout has yet", "reference", ref, "err", err)
		return
	}
	_, err = w.Temporal.SignalWithStartWorkflow(ctx, domain.WorkflowIDOn(w.Queue, id), app.SignalWake, nil,
		client.StartWorkflowOptions{ID: domain.WorkflowIDOn(w.Queue, id), TaskQueue: w.Queue}, app.WorkflowName, app.Input{PayoutID: id, Timing: w.Timing})
	if err != nil {
		w.Log.Warn("wake payout workflow with rail news", "payout_id", id, "reference", ref, "err", err)
	}
}
