package payout

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// Recorded histories (testdata/*_history.json, written by TestPayoutPaths in
// services/gpubill/internal/payoutstack with GPUBILL_RECORD_HISTORY=1) replay against today's workflow code: a
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
