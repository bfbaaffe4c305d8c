package settlement

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// Recorded histories (testdata/*.json, from TestCloseSurvivesWorkerRestart,
// TestSchedulesAtStartup and TestRemittanceAgainstRealLedger with
// GPUBILL_RECORD_HISTORY=1) replay against today's workflow code: a
// non-deterministic change fails here, not in production.
// cycle_history.json was recorded before the sliding window (its runs
// settle a batch and await it all: the "sliding-window" change's
// DefaultVersion) and is kept; cycle_window_history.json is the window
// (children in flight), kept too; cycle_page_history.json hands each page
// to the SettleProviders activity (versionStarted), and
// provider_started_history.json is a provider workflow it started.
// cycle_page_2026-12-01_history.json and
// provider_started_2026-12-01_history.json were recorded just before
// issue 15's restructuring (activities registered by name, the page
// tracker, the provider's local activity named ActSettleProviderSteps for
// runs of ProviderVersionSteps); their provider run uses the local
// activity's legacy name. cycle_page_steps_history.json and
// provider_steps_history.json were recorded after it (a provider run of
// ProviderVersionSteps).
// remittance_history.json was recorded before tax periods had a zone (the
// "tax-period-zone" change's DefaultVersion: wait for the UTC month's end)
// and is kept; remittance_zone_history.json waits for the month's end in
// Asia/Shanghai.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*_history.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata (%v)", err)
	}
	rem := app.Remittances{Periods: taxperiod.Default()}
	for _, f := range files {
		r := worker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(app.CycleWorkflow, workflow.RegisterOptions{Name: app.CycleWorkflowName})
		r.RegisterWorkflowWithOptions(app.ProviderWorkflow, workflow.RegisterOptions{Name: app.ProviderWorkflowName})
		r.RegisterWorkflowWithOptions(app.CycleOpenerWorkflow, workflow.RegisterOptions{Name: app.CycleOpenerWorkflowName})
		r.RegisterWorkflowWithOptions(rem.MonthlyWorkflow, workflow.RegisterOptions{Name: app.RemittanceMonthlyWorkflowName})
		r.RegisterWorkflowWithOptions(rem.RemitWorkflow, workflow.RegisterOptions{Name: app.RemittanceWorkflowName})
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
			t.Errorf("replay %s: %v", f, err)
		}
	}
}

// recordOpenerHistory writes a completed run of the cycle opener (started
// by its schedule) to testdata (GPUBILL_RECORD_HISTORY=1).
func recordOpenerHistory(t *testing.T, tc client.Client) {
	if os.Getenv("GPUBILL_RECORD_HISTORY") != "1" {
		return
	}
	resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowType = '" + app.CycleOpenerWorkflowName + "' AND ExecutionStatus = 'Completed'"})
	if err != nil || len(resp.Executions) == 0 {
		t.Fatalf("list opener runs: %v (%d)", err, len(resp.GetExecutions()))
	}
	e := resp.Executions[0].Execution
	writeHistory(t, tc, "opener_history.json", e.WorkflowId, e.RunId)
}

func writeHistory(t *testing.T, tc client.Client, name, id, runID string) {
	t.Helper()
	h := &historypb.History{}
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: " "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
