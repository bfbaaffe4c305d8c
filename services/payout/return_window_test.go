package payout

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A paid payout's workflow watches for a return for ReturnWindow from when
// it was paid, across continue-as-new: the continued run started the
// window again at its own start, so with polls close enough together
// (GPUBILL_PAYOUT_POLL_MAX under about 5 minutes: a run reaches the
// history limit in less than the 72 h window) it never ended. On a real
// dev server (the test environment counts no history), with a history
// limit a few polls long, each run continues as new within seconds.
func TestReturnWindowHoldsAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	const window = 15 * time.Second
	tc := dialTemporal(t, testkit.NewTemporal(t))
	const queue, id = "payout-return-window", "payout-po-1"
	var (
		runs    atomic.Int32 // Prepare is a run's first activity
		mu      sync.Mutex
		paidAt  time.Time
		started []time.Duration // each run's start, after paidAt
	)
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(app.Workflow, workflow.RegisterOptions{Name: app.WorkflowName})
	w.RegisterActivityWithOptions(func(context.Context, string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if runs.Add(1) == 1 {
			paidAt = time.Now()
		}
		started = append(started, time.Since(paidAt).Round(time.Second))
		return domain.StatusPaid, nil
	}, activity.RegisterOptions{Name: app.ActPrepare})
	w.RegisterActivityWithOptions(func(context.Context, string) (string, error) { return domain.StatusPaid, nil },
		activity.RegisterOptions{Name: app.ActFollow})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), window+45*time.Second)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, app.WorkflowName,
		app.Input{PayoutID: "po-1", Timing: app.Timing{PollFirst: 100 * time.Millisecond, PollMax: 500 * time.Millisecond,
			ReturnWindow: window, HistoryMax: 60}})
	if err != nil {
		t.Fatal(err)
	}
	var status string
	err = run.Get(ctx, &status) // follows the continued runs
	ended := time.Now()
	mu.Lock()
	since := ended.Sub(paidAt)
	t.Logf("runs started %v after paid", started)
	mu.Unlock()
	if err != nil {
		t.Fatalf("a paid payout still followed %s after it was paid (return window %s), in its run %d: %v",
			since.Round(time.Second), window, runs.Load(), err)
	}
	if status != domain.StatusPaid {
		t.Fatalf("status %s, want %s", status, domain.StatusPaid)
	}
	if runs.Load() < 2 {
		t.Fatalf("the workflow did not continue as new within the return window: the test proves nothing")
	}
	if since > window+30*time.Second {
		t.Fatalf("a paid payout followed %s after it was paid (return window %s, %d runs)", since.Round(time.Second), window, runs.Load())
	}
}

// dialTemporal connects to a dev server, waiting for its default namespace.
func dialTemporal(t testing.TB, addr string) client.Client {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tc, err := client.Dial(client.Options{HostPort: addr, Logger: TemporalLogger(slog.New(slog.DiscardHandler))})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
			cancel()
			if err == nil {
				t.Cleanup(tc.Close)
				return tc
			}
			tc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporal at %s not ready: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
