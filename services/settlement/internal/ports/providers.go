package ports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/gpubill/gpubill/services/settlement/internal/adapters"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// How SettleProviders follows a page (PageTiming's defaults).
const (
	pagePollDefault   = 50 * time.Millisecond // settlement's table, for the providers in flight
	pagePollMax       = 2 * time.Second       // the poll backs off to this while nothing finishes
	pageQuiet         = time.Second           // once nothing has finished for this long
	pageAskDefault    = 5 * time.Second       // the runner, for a provider in flight this long
	pageAskMax        = time.Minute           // asking again backs off (doubling) to this
	pageStartsMax     = 32                    // start calls at once
	pageHeartbeatStep = 2 * time.Second       // the cycle workflow's HeartbeatTimeout is 15 s
)

// PageTiming is how often SettleProviders polls settlement's table for the
// providers in flight (Poll) and after how long it asks the runner about a
// provider the table does not show done (Ask): a provider whose settlement
// failed, or ended held by a hold released since.
type PageTiming struct {
	Poll time.Duration
	Ask  time.Duration
}

// ProviderRunner runs providers' settlements: StartProvider starts one (or
// joins the one in flight); ProviderOutcome tells whether it still runs and,
// if it ended, its result. An outcome error wrapping ErrProviderFailed is
// the provider's own failure (counted; the page goes on); any other error
// is transient and fails the page's attempt, which is retried.
type ProviderRunner interface {
	StartProvider(ctx context.Context, in app.ProviderInput) error
	ProviderOutcome(ctx context.Context, in app.ProviderInput) (running bool, res app.ProviderResult, err error)
}

// ErrProviderFailed marks a provider settlement that ended in failure.
var ErrProviderFailed = errors.New("provider settlement failed")

// WorkflowRunner runs settle-{cycle}-{provider} on Temporal: the
// production ProviderRunner.
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
	default:
		return false, res, fmt.Errorf("%w: %s ended %s", ErrProviderFailed, id, st)
	}
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

// SettleProviders settles one page of a cycle's providers: it starts each
// provider's settlement (settle-{cycle}-{provider}), at most in.Window in
// flight (started and not yet done in settlement's table; a workflow may
// still be recording its completion), and counts the outcomes. It learns them from settlement's own
// table (a provider is done when every currency is settled, or held),
// polled for the providers in flight, rather than from one long poll per
// workflow on the Temporal server (that was 16 % of the server's CPU).
// The runner is asked only about providers the table has not shown done
// for a while: a failed settlement leaves its rows pending. Providers
// settled already (a retried page, a release) are counted without a run. A
// transient error fails the attempt; the retry skips what settled and joins
// what is in flight.
func (a *Activities) SettleProviders(ctx context.Context, in app.SettleProvidersInput) (app.SettleProvidersResult, error) {
	var res app.SettleProvidersResult
	timing := a.PageTiming
	if timing.Poll <= 0 {
		timing.Poll = pagePollDefault
	}
	if timing.Ask <= 0 {
		timing.Ask = pageAskDefault
	}
	states, err := a.Store.ProviderStates(ctx, in.CycleID, in.Providers)
	if err != nil {
		return res, err
	}
	var todo []string
	askOnly := map[string]bool{} // held before this page: a 'held' row may be stale
	for _, p := range in.Providers {
		switch states[p] {
		case adapters.ProviderSettled:
			res.Settled++
		case adapters.ProviderHeld:
			askOnly[p] = true
			todo = append(todo, p)
		default:
			todo = append(todo, p)
		}
	}
	window := in.Window
	if window <= 0 {
		window = len(todo)
	}
	// A provider still running when asked is asked again after twice the
	// wait, up to pageAskMax: a ledger outage keeps a whole window in
	// retries, and 500 describes every 5 s would load Temporal for nothing.
	type flight struct {
		asked    time.Time
		askAfter time.Duration
	}
	inFlight := map[string]*flight{}
	count := func(p string, r app.ProviderResult, err error) {
		delete(inFlight, p)
		switch {
		case errors.Is(err, ErrProviderFailed):
			res.Failed++
			a.Log.Error("provider settlement failed", "cycle", in.CycleID, "provider", p, "err", err)
		case r.Held:
			res.Held++
		default:
			res.Settled++
		}
	}
	// The poll backs off (doubling, up to pagePollMax) once nothing has
	// finished for pageQuiet — a ledger outage holds every provider in its
	// retries — and returns to timing.Poll when one finishes.
	wait, lastDone := timing.Poll, time.Now()
	poll := time.NewTimer(wait)
	defer poll.Stop()
	beat := time.Now()
	next := 0
	for {
		// Fill the window.
		if n := min(window-len(inFlight), len(todo)-next); n > 0 {
			batch := todo[next : next+n]
			if err := a.startAll(ctx, in.CycleID, batch); err != nil {
				return res, err
			}
			now := time.Now()
			for _, p := range batch {
				f := &flight{asked: now, askAfter: timing.Ask}
				if askOnly[p] {
					f.askAfter = 0 // its table state may be stale: ask from the first poll
				}
				inFlight[p] = f
			}
			next += n
		}
		if len(inFlight) == 0 {
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-poll.C:
		}
		ids := slices.Sorted(maps.Keys(inFlight))
		states, err := a.Store.ProviderStates(ctx, in.CycleID, ids)
		if err != nil {
			return res, err
		}
		before := len(inFlight)
		now := time.Now()
		for _, p := range ids {
			switch st := states[p]; {
			case st == adapters.ProviderSettled:
				count(p, app.ProviderResult{}, nil)
			case st == adapters.ProviderHeld && !askOnly[p]:
				count(p, app.ProviderResult{Held: true}, nil)
			case now.Sub(inFlight[p].asked) >= inFlight[p].askAfter:
				f := inFlight[p]
				running, r, err := a.Runner.ProviderOutcome(ctx, app.ProviderInput{CycleID: in.CycleID, ProviderID: p})
				if err != nil && !errors.Is(err, ErrProviderFailed) {
					return res, err
				}
				if !running {
					count(p, r, err)
					continue
				}
				f.asked, f.askAfter = now, min(max(2*f.askAfter, timing.Poll), max(pageAskMax, timing.Ask))
			}
		}
		switch {
		case len(inFlight) < before:
			wait, lastDone = timing.Poll, now
		case now.Sub(lastDone) >= pageQuiet:
			wait = min(2*wait, max(pagePollMax, timing.Poll))
		}
		poll.Reset(wait)
		if now.Sub(beat) >= pageHeartbeatStep {
			activity.RecordHeartbeat(ctx, res)
			beat = now
		}
	}
}

// startAll starts the providers' settlements, pageStartsMax at a time.
func (a *Activities) startAll(ctx context.Context, cycle string, providers []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pageStartsMax)
	for _, p := range providers {
		g.Go(func() error {
			return a.Runner.StartProvider(gctx, app.ProviderInput{CycleID: cycle, ProviderID: p})
		})
	}
	return g.Wait()
}
