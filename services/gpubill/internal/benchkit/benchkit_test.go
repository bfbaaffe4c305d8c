package benchkit

import (
	"context"
	"errors"
	"testing"

	commandpb "go.temporal.io/api/command/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// ceiling_temporal stops its clock at the completions the server accepted
// from its own worker: only those count.
func TestCompletionsCountWhatTheServerAcceptedFromTheWatchedWorker(t *testing.T) {
	c := NewCompletions()
	c.watch("ceiling")
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	refused := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return errors.New("unavailable")
	}
	respond := func(identity string, commands ...enumspb.CommandType) *workflowservice.RespondWorkflowTaskCompletedRequest {
		r := &workflowservice.RespondWorkflowTaskCompletedRequest{Identity: identity}
		for _, ct := range commands {
			r.Commands = append(r.Commands, &commandpb.Command{CommandType: ct})
		}
		return r
	}
	const method = "/temporal.api.workflowservice.v1.WorkflowService/RespondWorkflowTaskCompleted"
	for _, call := range []struct {
		req     any
		invoker grpc.UnaryInvoker
		wantErr bool
	}{
		{respond("ceiling", enumspb.COMMAND_TYPE_RECORD_MARKER, enumspb.COMMAND_TYPE_COMPLETE_WORKFLOW_EXECUTION), ok, false}, // counts
		{respond("ceiling", enumspb.COMMAND_TYPE_COMPLETE_WORKFLOW_EXECUTION), refused, true},                                 // the server refused it
		{respond("settlement-worker", enumspb.COMMAND_TYPE_COMPLETE_WORKFLOW_EXECUTION), ok, false},                           // another worker's
		{respond("ceiling", enumspb.COMMAND_TYPE_SCHEDULE_ACTIVITY_TASK), ok, false},                                          // not a completion
		{&workflowservice.StartWorkflowExecutionRequest{Identity: "ceiling"}, ok, false},                                      // not a task's answer
	} {
		err := c.intercept(context.Background(), method, call.req, nil, nil, call.invoker)
		if (err != nil) != call.wantErr {
			t.Fatalf("intercept(%T): error %v, want an error: %v", call.req, err, call.wantErr)
		}
	}
	n, last := c.count("ceiling")
	if n != 1 || last.IsZero() {
		t.Fatalf("counted %d completions (last at %v), want 1", n, last)
	}
	if n, _ := c.count("settlement-worker"); n != 0 {
		t.Fatalf("an identity not watched counted %d completions", n)
	}
}

// ceiling_durable_events writes every event it carries once, to a table
// shaped like metering.usage_events, and counts them before it returns.
func TestDurableUsageWritesEachEventOnce(t *testing.T) {
	pool := testkit.NewMigratedPool(t, "metering", migrations.For("metering"))
	const events = 30_000 // 300 messages: a full pull of 256 and one of 44
	fig := DurableUsage(t, pool, events)
	if fig.Bench != "ceiling_durable_events" || fig.N != events || fig.Value <= 0 {
		t.Fatalf("%s: %d events at %.0f/s, want ceiling_durable_events of %d", fig.Bench, fig.N, fig.Value, events)
	}
}
