package settlement

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/testkit"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// recordCycleEnv names the code TestRecordCycleHistories records (the
// label in its files' names); unset, the test is skipped, so make test
// never runs it.
const recordCycleEnv = "GPUBILL_RECORD_CYCLE_HISTORY"

// Rerun signal as RerunCycleWorkflow sends it (app.SignalRerun,
// app.RerunSignal), spelled out: this file also records the code from
// before the signal existed, to which a settlement API of the code after
// it sends it during a rollout.
const recordRerunSignal = "rerun"

type recordRerun struct{ Reason string }

// TestRecordCycleHistories records every run of settle-{cycle} on a real
// Temporal dev server (the SDK's test environment keeps no history to
// export) for the replay tests (replay_test.go), in two scenarios of three
// providers, two a page:
//
//   - settled: the cycle's workflow started and waiting for its close (its
//     timer), a close request, every provider settled, the cycle settled;
//   - failed_rerun: the same with p-00001's settlement refused by the
//     ledger (it fails), a rerun signal while the first page runs, then,
//     the refusal lifted, another while the pass's end (CompleteCycle)
//     runs. The code of the rerun change (03f9474) makes a second pass
//     that settles p-00001; the code before it ends the run, the cycle
//     closing: the history a GetVersion("rerun") guard must replay.
//
// Files: testdata/cycle_{label}_{scenario}_run{N}_history.json, label from
// GPUBILL_RECORD_CYCLE_HISTORY; the label's earlier files are removed
// first. Needs bin/temporal. To re-record, from the repository's root:
//
//	# the code before the rerun signal (label prererun)
//	git worktree add /tmp/prererun 03f9474~1
//	cp services/settlement/record_cycle_test.go /tmp/prererun/services/settlement/
//	mkdir -p /tmp/prererun/bin && cp bin/temporal /tmp/prererun/bin/
//	(cd /tmp/prererun && GPUBILL_RECORD_CYCLE_HISTORY=prererun go test ./services/settlement -run TestRecordCycleHistories -count=1 -v)
//	cp /tmp/prererun/services/settlement/testdata/cycle_prererun_* services/settlement/testdata/
//	git worktree remove --force /tmp/prererun
//	# today's code (label rerun)
//	GPUBILL_RECORD_CYCLE_HISTORY=rerun go test ./services/settlement -run TestRecordCycleHistories -count=1 -v
//
// then update the table of TestRerunHistoriesExerciseTheChange.
func TestRecordCycleHistories(t *testing.T) {
	label := os.Getenv(recordCycleEnv)
	if label == "" {
		t.Skipf("records histories for the replay tests: set %s (see the comment)", recordCycleEnv)
	}
	old, err := filepath.Glob(filepath.Join("testdata", "cycle_"+label+"_*_history.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		give    string
		refused string // provider whose settlement the ledger refuses until the pass's end; "" none
	}{
		{give: "settled"},
		{give: "failed_rerun", refused: "p-00001"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			recordCycle(t, "cycle_"+label+"_"+tt.give, tt.refused)
		})
	}
}

// recordCycle runs one scenario of TestRecordCycleHistories and writes its
// runs as {prefix}_run{N}_history.json.
func recordCycle(t *testing.T, prefix, refused string) {
	const (
		providers = 3
		batch     = 2
		runWait   = 2 * time.Minute
	)
	ctx := context.Background()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc, WithBatchSize(batch))
	now := time.Now().UTC()
	cy := cal.At(now) // the current cycle: its close is ahead, so its run waits on a timer
	f.clock.Set(now)
	f.seed(t, cy.ID, providers)
	id := domain.CycleWorkflowID(cy.ID)

	hooks := &activityHooks{}
	if refused != "" {
		key := domain.SettlementKey(cy.ID, refused, "CNY")
		f.ledger.Refuse(key, status.Error(codes.InvalidArgument, fmt.Sprintf("provider:%s:pending would go negative", refused)))
		signal := func(reason string) {
			if err := tc.SignalWorkflow(ctx, id, "", recordRerunSignal, recordRerun{Reason: reason}); err != nil {
				t.Errorf("rerun signal (%s): %v", reason, err)
			}
		}
		hooks.once(app.ActSettleProviders, func() { signal("asked while the first page runs") })
		hooks.once(app.ActCompleteCycle, func() {
			f.ledger.Refuse(key, nil)
			signal("close request")
		})
	}
	opts := WorkerOptions()
	opts.Interceptors = []interceptor.WorkerInterceptor{hooks}
	w := worker.New(tc, f.s.queue, opts)
	Register(w, f.s.acts, f.s.d.TaxPeriods)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	if err := ports.StartCycleWorkflow(ctx, tc, f.s.queue, cy, batch, app.WindowDefault); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, runWait, func() bool { return hasEvent(t, tc, id, "", enumspb.EVENT_TYPE_TIMER_STARTED) },
		"the cycle's run waits for its close")
	if _, err := f.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cy.ID, Reason: "recorded close"}); err != nil {
		t.Fatal(err)
	}
	var st enumspb.WorkflowExecutionStatus
	testkit.Eventually(t, runWait, func() bool {
		d, err := tc.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		st = d.WorkflowExecutionInfo.Status
		return st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && st != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	}, "the cycle's last run ends")
	if st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("cycle's last run ended %s, want completed", st)
	}
	if want := map[string]int{app.ActSettleProviders: 1, app.ActCompleteCycle: 1}; refused != "" && !maps.Equal(hooks.counts(), want) {
		t.Fatalf("hooks fired %v, want %v: the rerun signals were not all sent (the scenario proves nothing without them)", hooks.counts(), want)
	}

	runs := cycleRuns(t, tc, id)
	for i, runID := range runs {
		writeHistory(t, tc, fmt.Sprintf("%s_run%d_history.json", prefix, i+1), id, runID)
	}
	var cycleStatus string
	if err := f.s.d.Pool.QueryRow(ctx, `select status from settlement.cycles where cycle_id = $1`, cy.ID).Scan(&cycleStatus); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d runs recorded, cycle %s %s", prefix, len(runs), cy.ID, cycleStatus)
}

// cycleRuns returns the run ids of the workflow, first to last, following
// each run's continued-from link back from the latest (visibility lags).
func cycleRuns(t *testing.T, tc client.Client, id string) []string {
	t.Helper()
	d, err := tc.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for runID := d.WorkflowExecutionInfo.Execution.RunId; runID != ""; {
		runs = append([]string{runID}, runs...)
		it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		first, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		runID = first.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
	}
	return runs
}

// hasEvent tells whether the run's history has an event of the type.
func hasEvent(t *testing.T, tc client.Client, id, runID string, typ enumspb.EventType) bool {
	t.Helper()
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetEventType() == typ {
			return true
		}
	}
	return false
}

// activityHooks is a worker interceptor calling a hook before the first
// execution of an activity type: the recorder's signals land in a run at
// a chosen point of it, whatever the timing.
type activityHooks struct {
	interceptor.WorkerInterceptorBase
	mu    sync.Mutex
	hooks map[string]func()
	fired map[string]int
}

func (h *activityHooks) once(activityType string, hook func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hooks == nil {
		h.hooks, h.fired = map[string]func(){}, map[string]int{}
	}
	h.hooks[activityType] = hook
}

func (h *activityHooks) fire(activityType string) {
	h.mu.Lock()
	hook := h.hooks[activityType]
	delete(h.hooks, activityType)
	if hook != nil {
		h.fired[activityType]++
	}
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
}

// counts returns how many times each activity type's hook fired.
func (h *activityHooks) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.fired)
}

func (h *activityHooks) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &hookedActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, hooks: h}
}

type hookedActivity struct {
	interceptor.ActivityInboundInterceptorBase
	hooks *activityHooks
}

func (a *hookedActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	a.hooks.fire(activity.GetInfo(ctx).ActivityType.Name)
	return a.Next.ExecuteActivity(ctx, in)
}
