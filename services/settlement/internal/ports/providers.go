package ports

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// pageHeartbeat is how often SettleProviders reports progress while it
// waits (the cycle workflow's HeartbeatTimeout is 15 s).
const pageHeartbeat = 2 * time.Second

// ProviderRunner runs one provider's settlement to its end and returns its
// result. An error wrapping ErrProviderFailed is the provider's own failure
// (counted, the page goes on); any other error is transient and fails the
// page's attempt, which is retried.
type ProviderRunner interface {
	RunProvider(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error)
}

// ErrProviderFailed marks a provider settlement that ended in failure.
var ErrProviderFailed = errors.New("provider settlement failed")

// WorkflowRunner runs settle-{cycle}-{provider} on Temporal: the
// production ProviderRunner.
type WorkflowRunner struct {
	Temporal  client.Client
	TaskQueue string
}

// RunProvider starts (or joins) the provider's workflow and waits for it.
func (r WorkflowRunner) RunProvider(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error) {
	var res app.ProviderResult
	run, err := StartProviderWorkflow(ctx, r.Temporal, r.TaskQueue, in)
	if err != nil {
		return res, err
	}
	err = run.Get(ctx, &res)
	var failed *temporal.WorkflowExecutionError
	if errors.As(err, &failed) {
		return res, fmt.Errorf("%w: %w", ErrProviderFailed, err)
	}
	return res, err
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

// SettleProviders settles one page of a cycle's providers: it runs each
// provider's settlement (settle-{cycle}-{provider}), at most in.Window at
// once, and counts the outcomes. Providers whose every currency is settled
// already (a retried page, a release) are counted without a new run. A
// transient error fails the attempt after the page's runs have ended; the
// retry skips what settled.
func (a *Activities) SettleProviders(ctx context.Context, in app.SettleProvidersInput) (app.SettleProvidersResult, error) {
	var res app.SettleProvidersResult
	done, err := a.Store.SettledProviders(ctx, in.CycleID, in.Providers)
	if err != nil {
		return res, err
	}
	window := in.Window
	if window <= 0 || window > len(in.Providers) {
		window = len(in.Providers)
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		transErr error
	)
	count := func(provider string, r app.ProviderResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, ErrProviderFailed):
			res.Failed++
			a.Log.Error("provider settlement failed", "cycle", in.CycleID, "provider", provider, "err", err)
		case err != nil:
			if transErr == nil {
				transErr = err
			}
		case r.Held:
			res.Held++
		default:
			res.Settled++
		}
	}
	stopBeat := heartbeat(ctx, func() any {
		mu.Lock()
		defer mu.Unlock()
		return res
	})
	defer stopBeat()
	sem := make(chan struct{}, window)
	for _, p := range in.Providers {
		if done[p] {
			count(p, app.ProviderResult{}, nil)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := a.Runner.RunProvider(ctx, app.ProviderInput{CycleID: in.CycleID, ProviderID: p})
			count(p, r, err)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, transErr
}

// heartbeat records details() as the activity's heartbeat every
// pageHeartbeat until stop is called.
func heartbeat(ctx context.Context, details func() any) (stop func()) {
	t := time.NewTicker(pageHeartbeat)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				activity.RecordHeartbeat(ctx, details())
			case <-quit:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { t.Stop(); close(quit) }
}
