package settlement

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
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
// cycle_prererun_*_history.json (every run of a cycle, recorded by the
// code before the rerun signal, 03f9474~1) and cycle_rerun_*_history.json
// (the same cycles on the code of the rerun change) are written by
// TestRecordCycleHistories; TestRerunHistoriesExerciseTheChange says what
// each holds. invoices_monthly_history.json and
// reconciliation_daily_history.json are written by
// TestRecordScheduledHistories. Every workflow Register registers is
// registered on the replayer (replayRegistry).
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*_history.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata (%v)", err)
	}
	for _, f := range files {
		r := worker.NewWorkflowReplayer()
		Register(replayRegistry{r}, &ports.Activities{}, taxperiod.Default())
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
			t.Errorf("replay %s: %v", f, err)
		}
	}
}

// replayRegistry registers on a replayer what Register registers on a
// worker: every settlement workflow, so a recorded history of any of them
// replays (a workflow added to Register and not here replayed nothing).
// Activities are not run on replay.
type replayRegistry struct{ worker.WorkflowReplayer }

func (replayRegistry) RegisterActivityWithOptions(any, activity.RegisterOptions) {}

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

// TestRerunHistoriesExerciseTheChange checks that the histories recorded
// across the "rerun" change (TestRecordCycleHistories), which
// TestReplayRecordedHistories replays, hold what makes that replay prove
// something: a run of the code before the change that received a rerun
// signal while its pass ended, CompleteCycle answering the cycle not
// settled, and completed (today's
// code, without GetVersion(changeRerun) returning DefaultVersion for it,
// would continue as new: a non-determinism error), and a run of the change
// that recorded the version and began another pass. Every recorded run is
// in the table, so a re-recording that changes them is looked at here.
func TestRerunHistoriesExerciseTheChange(t *testing.T) {
	t.Parallel()
	type facts struct {
		RerunSignals int    // rerun signals received
		RerunVersion bool   // GetVersion(changeRerun) recorded
		Settled      string // CompleteCycle's answer ("" not asked)
		End          enumspb.EventType
	}
	var (
		canned    = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
		completed = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
	)
	tests := []struct {
		give string
		want facts
	}{
		{give: "cycle_prererun_settled_run1", want: facts{End: canned}}, // waits for the close; first page
		{give: "cycle_prererun_settled_run2", want: facts{End: canned}},
		{give: "cycle_prererun_settled_run3", want: facts{Settled: "true", End: completed}},
		{give: "cycle_prererun_failed_rerun_run1", want: facts{RerunSignals: 1, End: canned}}, // signal dropped at continue-as-new
		{give: "cycle_prererun_failed_rerun_run2", want: facts{End: canned}},
		{give: "cycle_prererun_failed_rerun_run3", want: facts{RerunSignals: 1, Settled: "false", End: completed}}, // the run the guard replays
		{give: "cycle_rerun_settled_run1", want: facts{End: canned}},
		{give: "cycle_rerun_settled_run2", want: facts{End: canned}},
		{give: "cycle_rerun_settled_run3", want: facts{Settled: "true", End: completed}},
		{give: "cycle_rerun_failed_rerun_run1", want: facts{RerunSignals: 1, End: canned}}, // signal carried to the pass's end
		{give: "cycle_rerun_failed_rerun_run2", want: facts{End: canned}},
		{give: "cycle_rerun_failed_rerun_run3", want: facts{RerunSignals: 1, RerunVersion: true, Settled: "false", End: canned}}, // another pass
		{give: "cycle_rerun_failed_rerun_run4", want: facts{End: canned}},
		{give: "cycle_rerun_failed_rerun_run5", want: facts{End: canned}},
		{give: "cycle_rerun_failed_rerun_run6", want: facts{Settled: "true", End: completed}},
	}
	recorded, err := filepath.Glob("testdata/cycle_*rerun_*_history.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != len(tests) {
		t.Errorf("%d histories recorded across the rerun change, %d in the table: %v", len(recorded), len(tests), recorded)
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(filepath.Join("testdata", tt.give+"_history.json"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got facts
			completeCycle := map[int64]bool{} // scheduled event ids of CompleteCycle
			dc := converter.GetDefaultDataConverter()
			for _, ev := range h.Events {
				if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.GetName() == app.ActCompleteCycle {
					completeCycle[ev.EventId] = true
				}
				if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && completeCycle[a.ScheduledEventId] {
					var settled bool
					if err := dc.FromPayloads(a.Result, &settled); err != nil {
						t.Fatalf("event %d: CompleteCycle's answer: %v", ev.EventId, err)
					}
					got.Settled = strconv.FormatBool(settled)
				}
				if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.SignalName == app.SignalRerun {
					got.RerunSignals++
				}
				if a := ev.GetMarkerRecordedEventAttributes(); a != nil && a.MarkerName == versionMarker {
					var change string
					if err := dc.FromPayloads(a.Details[versionMarkerChangeID], &change); err != nil {
						t.Fatalf("event %d: version marker's change: %v", ev.EventId, err)
					}
					got.RerunVersion = got.RerunVersion || change == rerunChangeID
				}
				got.End = ev.EventType
			}
			if got != tt.want {
				t.Errorf("history holds %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The SDK's version marker (workflow.GetVersion) and its change id's
// detail key, as it writes them into a history, and the change id of the
// rerun (app's changeRerun).
const (
	versionMarker         = "Version"
	versionMarkerChangeID = "change-id"
	rerunChangeID         = "rerun"
)
