package settlement

import (
	"context"
	"fmt"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// envClient is the Temporal client of the API and the activities in the
// time-skipping tests, standing in for the server as far as settle-{cycle}
// goes: a start of a workflow id whose run the test environment is running
// (live) joins it, as the server does with USE_EXISTING, and a signal
// (with or without start) goes to that run; any other start is recorded
// for the test to run. Calls it does not implement panic (nil Client).
type envClient struct {
	client.Client
	mu     sync.Mutex
	liveID string                             // the workflow id the environment runs now ("" none)
	env    *testsuite.TestWorkflowEnvironment // its run
	starts map[string]any                     // the input of each run started (by id), for the test to run
	// The runs of each id that ended, oldest first (the last is the one
	// DescribeWorkflowExecution answers), each failed run's error by id and
	// run, and ListClosedWorkflow's error.
	runs    map[string][]*workflowpb.WorkflowExecutionInfo
	failure map[string]error
	listErr error
}

func newEnvClient() *envClient {
	return &envClient{starts: map[string]any{}, runs: map[string][]*workflowpb.WorkflowExecutionInfo{}, failure: map[string]error{}}
}

// live makes env the running run of id (nil env: none runs).
func (c *envClient) live(id string, env *testsuite.TestWorkflowEnvironment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.liveID, c.env = id, env
	if env == nil {
		c.liveID = ""
	}
}

// started is the input of the cycle workflow started as id.
func (c *envClient) started(id string) (app.CycleInput, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.starts[id].(app.CycleInput)
	return in, ok
}

// record notes a start of id; a start of the live run joins it.
func (c *envClient) record(id string, args []any) error {
	if id == c.liveID {
		return nil
	}
	if len(args) != 1 {
		return fmt.Errorf("envClient: start of %s with %d arguments", id, len(args))
	}
	c.starts[id] = args[0]
	return nil
}

func (c *envClient) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return nil, c.record(o.ID, args)
}

func (c *envClient) SignalWithStartWorkflow(_ context.Context, id, signal string, arg any, _ client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	env := c.env
	if id != c.liveID {
		env = nil
	}
	err := c.record(id, args)
	c.mu.Unlock()
	if env != nil {
		env.SignalWorkflow(signal, arg)
	}
	return nil, err
}

func (c *envClient) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs := c.runs[id]
	if len(runs) == 0 {
		return nil, fmt.Errorf("envClient: no run of %s", id)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: runs[len(runs)-1]}, nil
}

// ListClosedWorkflow lists the runs of the filter's workflow id, the one
// that closed last first, as the server does.
func (c *envClient) ListClosedWorkflow(_ context.Context, req *workflowservice.ListClosedWorkflowExecutionsRequest) (*workflowservice.ListClosedWorkflowExecutionsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listErr != nil {
		return nil, c.listErr
	}
	runs := c.runs[req.GetExecutionFilter().GetWorkflowId()]
	var out []*workflowpb.WorkflowExecutionInfo
	for i := len(runs) - 1; i >= 0 && len(out) < int(req.GetMaximumPageSize()); i-- {
		out = append(out, runs[i])
	}
	return &workflowservice.ListClosedWorkflowExecutionsResponse{Executions: out}, nil
}

func (c *envClient) GetWorkflow(_ context.Context, id, runID string) client.WorkflowRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return failedRun{id: id, runID: runID, err: c.failure[id+"/"+runID]}
}

// fail adds a run of id that failed with err (its latest).
func (c *envClient) fail(id, runID string, err error) {
	c.end(id, runID, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failure[id+"/"+runID] = err
}

// end adds a run of id that ended in status (its latest), a second after
// the one before.
func (c *envClient) end(id, runID string, status enumspb.WorkflowExecutionStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	closed := time.Date(2026, 2, 17, 0, 0, len(c.runs[id]), 0, time.UTC)
	c.runs[id] = append(c.runs[id], &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Status:    status,
		CloseTime: timestamppb.New(closed),
	})
}

// failedRun is a run that ended with err.
type failedRun struct {
	client.WorkflowRun
	id, runID string
	err       error
}

func (r failedRun) GetID() string    { return r.id }
func (r failedRun) GetRunID() string { return r.runID }
func (r failedRun) Get(context.Context, any) error {
	if r.err == nil {
		return fmt.Errorf("envClient: run %s of %s did not fail", r.runID, r.id)
	}
	return r.err
}
