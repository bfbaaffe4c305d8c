package app

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Timeouts and retries of the cycle's activities. Transient failures (the
// ledger down) retry with backoff for as long as ScheduleToClose allows;
// business failures are non-retryable application errors.
var (
	cycleRetry = &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	}
	cycleActivity = workflow.ActivityOptions{
		StartToCloseTimeout:    time.Minute,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            cycleRetry,
	}
	snapshotActivity = workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Minute, // 100 000 providers, paged
		HeartbeatTimeout:       time.Minute,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            cycleRetry,
	}
)

// Version of the settle phase (workflow.GetVersion): DefaultVersion runs
// (recorded before the window) start a run's whole page of children and
// await them all (settleBatch); versionWindow runs keep at most Window
// children in flight (settleWindow); versionStarted runs hand the page to
// the SettleProviders activity, which starts each provider's workflow
// itself (settlePage).
const (
	changeWindow   = "sliding-window"
	versionWindow  = 1
	versionStarted = 2
)

// Version of a pass's end (workflow.GetVersion, recorded only when a
// rerun was asked for and the cycle is not settled): DefaultVersion runs
// (before SignalRerun) end there; versionRerun runs start another pass
// over the providers. A run that ended before it, with a rerun signal in
// its history, replays as it ran.
const (
	changeRerun  = "rerun"
	versionRerun = 1
)

// pageActivity runs SettleProviders: a page of provider workflows, each
// retrying its own transient failures for up to a day. The activity
// heartbeats while it waits, so a worker that dies mid-page is noticed
// within HeartbeatTimeout and the page is run again (settled providers are
// skipped; running ones are joined, not started twice).
var pageActivity = workflow.ActivityOptions{
	StartToCloseTimeout:    25 * time.Hour,
	HeartbeatTimeout:       15 * time.Second,
	ScheduleToCloseTimeout: 72 * time.Hour,
	RetryPolicy:            cycleRetry,
}

// CycleWorkflow is settle-{cycle}: a durable timer to the cycle's end plus
// grace (or a close signal), then the close: close the cycle in the ledger,
// snapshot every provider's gross, and settle them one page of providers
// per run, at most Window provider workflows (settle-{cycle}-{provider}) in
// flight, continuing as new between pages so the history stays small (a
// run of the current version is about 20 events, whatever the page size).
// A pass over the pages never returns to one it has done: a rerun signal
// (SignalRerun: a close request on the closing cycle, settlement's
// start-up, the daily opener) received during a pass starts another pass
// once it is done if the cycle is not settled, so a provider that failed
// on an earlier page, its cause gone since, is settled.
func CycleWorkflow(ctx workflow.Context, in CycleInput) error {
	if in.BatchSize <= 0 || in.BatchSize > BatchSizeMax {
		in.BatchSize = BatchSizeDefault
	}
	if in.Window <= 0 || in.Window > WindowMax {
		in.Window = WindowDefault
	}
	progress := in.Progress
	progress.Runs++
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return progress, nil }); err != nil {
		return err
	}
	closeCh := workflow.GetSignalChannel(ctx, SignalClose)
	rerunCh := workflow.GetSignalChannel(ctx, SignalRerun)
	actx := workflow.WithActivityOptions(ctx, cycleActivity)

	if in.Phase == "" || in.Phase == PhaseWait {
		settled, err := closeCycle(ctx, actx, closeCh, &in)
		if err != nil || settled {
			return err
		}
		in.Phase = PhaseSettle
	}
	if in.After == "" {
		// A pass begins: a rerun asked for before it is this pass.
		receiveRerun(rerunCh)
		in.Rerun = ""
	}

	var batch []string
	if err := workflow.ExecuteActivity(actx, ActNextProviders, NextProvidersInput{CycleID: in.CycleID, After: in.After, Limit: in.BatchSize}).Get(ctx, &batch); err != nil {
		return fmt.Errorf("next providers of %s: %w", in.CycleID, err)
	}
	if len(batch) == 0 {
		return endPass(ctx, actx, closeCh, rerunCh, in, progress)
	}
	switch workflow.GetVersion(ctx, changeWindow, workflow.DefaultVersion, versionStarted) {
	case workflow.DefaultVersion:
		settleBatch(ctx, in.CycleID, batch, &progress)
	case versionWindow:
		settleWindow(ctx, in.CycleID, batch, in.Window, &progress)
	default:
		if err := settlePage(ctx, in.CycleID, batch, in.Window, &progress); err != nil {
			return err
		}
	}

	// Signals sent during this run would be lost across continue-as-new:
	// drain them (a close request is moot once the close runs; a rerun is
	// carried to the pass's end).
	for closeCh.ReceiveAsync(nil) {
	}
	if reason, asked := receiveRerun(rerunCh); asked {
		in.Rerun = reason
	}
	in.After = batch[len(batch)-1]
	in.Progress = progress
	return workflow.NewContinueAsNewError(ctx, CycleWorkflowName, in)
}

// endPass ends a pass over the cycle's providers: the cycle is marked
// settled if every provider of it is; if not, and a rerun was asked for
// during the pass, another pass begins (continue-as-new from the first
// page).
func endPass(ctx, actx workflow.Context, closeCh, rerunCh workflow.ReceiveChannel, in CycleInput, progress Progress) error {
	var settled bool
	if err := workflow.ExecuteActivity(actx, ActCompleteCycle, in.CycleID).Get(ctx, &settled); err != nil {
		return fmt.Errorf("complete cycle %s: %w", in.CycleID, err)
	}
	if reason, asked := receiveRerun(rerunCh); asked {
		in.Rerun = reason
	}
	if !settled && in.Rerun != "" && workflow.GetVersion(ctx, changeRerun, workflow.DefaultVersion, versionRerun) >= versionRerun {
		workflow.GetLogger(ctx).Info("cycle not settled: another pass over its providers, a rerun was asked for",
			"cycle", in.CycleID, "by", in.Rerun, "providers", progress.Providers, "settled", progress.Settled,
			"held", progress.Held, "failed", progress.Failed, "runs", progress.Runs)
		for closeCh.ReceiveAsync(nil) {
		}
		in.After, in.Rerun, in.Progress = "", "", Progress{Runs: progress.Runs}
		return workflow.NewContinueAsNewError(ctx, CycleWorkflowName, in)
	}
	log := workflow.GetLogger(ctx).Info
	msg := "cycle settled"
	if !settled {
		// Held or failed providers keep the cycle closing: a release,
		// a close request or the daily opener settles them.
		log, msg = workflow.GetLogger(ctx).Warn, "cycle stays closing: providers held or failed"
	}
	log(msg, "cycle", in.CycleID, "providers", progress.Providers,
		"settled", progress.Settled, "held", progress.Held, "failed", progress.Failed, "runs", progress.Runs)
	return nil
}

// receiveRerun drains the rerun signals received so far: asked if any,
// and the reason of the last ("rerun" if it gave none).
func receiveRerun(ch workflow.ReceiveChannel) (reason string, asked bool) {
	for {
		var s RerunSignal
		if !ch.ReceiveAsync(&s) {
			return reason, asked
		}
		reason, asked = s.Reason, true
		if reason == "" {
			reason = SignalRerun
		}
	}
}

// closeCycle is the wait phase: it records the cycle, waits for its close
// (timer or signal; the next cycle's workflow is started then), closes it
// in the ledger and snapshots every provider's gross. settled: the cycle
// was settled already (nothing to do).
func closeCycle(ctx, actx workflow.Context, closeCh workflow.ReceiveChannel, in *CycleInput) (settled bool, err error) {
	var info CycleInfo
	if err := workflow.ExecuteActivity(actx, ActEnsureCycle, in.CycleID).Get(ctx, &info); err != nil {
		return false, fmt.Errorf("ensure cycle %s: %w", in.CycleID, err)
	}
	if info.Status == domain.CycleSettled {
		return true, nil
	}
	if info.Status == domain.CycleOpen {
		reason := waitForClose(ctx, closeCh, *in)
		if in.CloseReason == "" {
			in.CloseReason = reason
		}
		// The next cycle's workflow (it waits for its own close) exists
		// from this cycle's close on, so cycles chain without a scheduler.
		if err := workflow.ExecuteActivity(actx, ActStartNextCycle, in.CycleID).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("start next cycle workflow", "err", err)
		}
	}
	if err := workflow.ExecuteActivity(actx, ActBeginClose, BeginCloseInput{CycleID: in.CycleID, Reason: in.CloseReason}).Get(ctx, nil); err != nil {
		return false, fmt.Errorf("begin close of %s: %w", in.CycleID, err)
	}
	sctx := workflow.WithActivityOptions(ctx, snapshotActivity)
	if err := workflow.ExecuteActivity(sctx, ActSnapshotCycle, in.CycleID).Get(ctx, nil); err != nil {
		return false, fmt.Errorf("snapshot cycle %s: %w", in.CycleID, err)
	}
	return false, nil
}

// waitForClose blocks until the cycle's close time or a close signal and
// returns the close reason.
func waitForClose(ctx workflow.Context, closeCh workflow.ReceiveChannel, in CycleInput) string {
	if in.CloseNow {
		closeCh.ReceiveAsync(nil)
		return in.CloseReason
	}
	wait := in.ClosesAt.Sub(workflow.Now(ctx))
	if wait <= 0 {
		return "past due"
	}
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	reason := "end of cycle plus grace"
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimer(tctx, wait), func(workflow.Future) {})
	sel.AddReceive(closeCh, func(c workflow.ReceiveChannel, _ bool) {
		var s CloseSignal
		c.Receive(ctx, &s)
		reason = "closed on request"
		if s.Reason != "" {
			reason = s.Reason
		}
	})
	sel.Select(ctx)
	return reason
}

// settlePage settles a run's page of providers in one activity that starts
// settle-{cycle}-{provider} for each (at most window at once) and waits for
// their results. Each provider keeps its own workflow, id and history; what
// the cycle saves is the child bookkeeping: a child costs its parent three
// history events and the server about eight persisted transitions, a
// workflow started eagerly by the worker's own client about two (its first
// workflow task comes back in the start response).
func settlePage(ctx workflow.Context, cycle string, page []string, window int, p *Progress) error {
	var res SettleProvidersResult
	pctx := workflow.WithActivityOptions(ctx, pageActivity)
	if err := workflow.ExecuteActivity(pctx, ActSettleProviders, SettleProvidersInput{CycleID: cycle, Providers: page, Window: window}).Get(ctx, &res); err != nil {
		return fmt.Errorf("settle providers of %s after %q: %w", cycle, page[0], err)
	}
	p.Providers += len(page)
	p.Settled += res.Settled
	p.Held += res.Held
	p.Failed += res.Failed
	return nil
}

// settleWindow (versionWindow runs, kept so their histories replay)
// settles a run's page of providers with at most window children in flight: the next child starts as soon as one completes, so
// the server and the worker stay busy until the page runs out; the run
// drains only its last window before continuing as new. Children complete
// in any order; the selector is workflow code driven by the history (of
// the children ready, it takes the first started), so a replay starts the
// same children in the same order.
func settleWindow(ctx workflow.Context, cycle string, page []string, window int, p *Progress) {
	sel := workflow.NewSelector(ctx)
	next, inFlight := 0, 0
	for next < len(page) || inFlight > 0 {
		for ; inFlight < window && next < len(page); next++ {
			provider := page[next]
			sel.AddFuture(startProvider(ctx, cycle, provider), func(f workflow.Future) {
				inFlight--
				account(ctx, cycle, provider, f, p)
			})
			inFlight++
		}
		sel.Select(ctx)
	}
}

// settleBatch starts one child per provider and waits for all of them (the
// settle phase of DefaultVersion runs, kept so their histories replay).
func settleBatch(ctx workflow.Context, cycle string, batch []string, p *Progress) {
	futures := make([]workflow.ChildWorkflowFuture, len(batch))
	for i, provider := range batch {
		futures[i] = startProvider(ctx, cycle, provider)
	}
	for i, f := range futures {
		account(ctx, cycle, batch[i], f, p)
	}
}

// startProvider starts settle-{cycle}-{provider}. The child outlives its
// parent (ABANDON): a run that ends or continues as new never cancels a
// settlement half done.
func startProvider(ctx workflow.Context, cycle, provider string) workflow.ChildWorkflowFuture {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            domain.ProviderWorkflowID(cycle, provider),
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowRunTimeout:    24 * time.Hour,
	})
	return workflow.ExecuteChildWorkflow(cctx, ProviderWorkflowName, ProviderInput{CycleID: cycle, ProviderID: provider, Version: ProviderVersionCurrent})
}

// account waits for a provider child and counts its result. A failed child
// leaves its provider pending (visible in the cycle's rows and the logs)
// without failing the cycle; re-closing or releasing retries it.
func account(ctx workflow.Context, cycle, provider string, f workflow.Future, p *Progress) {
	p.Providers++
	var res ProviderResult
	err := f.Get(ctx, &res)
	var already *temporal.ChildWorkflowExecutionAlreadyStartedError
	switch {
	case errors.As(err, &already):
		// A release started this provider's settlement already; it
		// settles on its own.
		p.Settled++
	case err != nil:
		p.Failed++
		workflow.GetLogger(ctx).Error("provider settlement failed", "cycle", cycle, "provider", provider, "err", err)
	case res.Held:
		p.Held++
	default:
		p.Settled++
	}
}
