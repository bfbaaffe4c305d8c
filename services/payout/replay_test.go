package payout

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// Recorded histories (testdata/*_history.json, written by TestPayoutPaths
// with GPUBILL_RECORD_HISTORY=1) replay against today's workflow code: a
// non-deterministic change (an activity renamed, a step added or moved)
// fails here, not on a payout in flight. returned_history.json is the
// returned path (gate, submit, rail polls and callbacks, paid, returned).
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*_history.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata (%v)", err)
	}
	for _, f := range files {
		r := worker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(app.Workflow, workflow.RegisterOptions{Name: app.WorkflowName})
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
			t.Errorf("replay %s: %v", f, err)
		}
	}
}

// recordHistory waits for payout-{id}'s run to end and writes its history
// to testdata/name (GPUBILL_RECORD_HISTORY=1).
func recordHistory(t *testing.T, tc client.Client, name, workflowID string) {
	t.Helper()
	if os.Getenv("GPUBILL_RECORD_HISTORY") != "1" {
		return
	}
	ctx := context.Background()
	var status string
	if err := tc.GetWorkflow(ctx, workflowID, "").Get(ctx, &status); err != nil {
		t.Fatalf("wait for %s: %v", workflowID, err)
	}
	h := &historypb.History{}
	it := tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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
