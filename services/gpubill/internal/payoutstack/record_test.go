package payoutstack_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
)

// payoutTestdata is payout's testdata, where its replay test
// (services/payout/replay_test.go) reads the recorded histories.
const payoutTestdata = "../../../payout/testdata"

// recordHistory waits for payout-{id}'s run to end and writes its history
// to payout's testdata/name (GPUBILL_RECORD_HISTORY=1).
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
	if err := os.WriteFile(filepath.Join(payoutTestdata, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
