package settlement

import (
	"context"
	"fmt"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

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
	// DescribeWorkflowExecution's answers and a failed run's error, by id.
	outcome map[string]*workflowservice.DescribeWorkflowExecutionResponse
	failure map[string]error
}

func newEnvClient() *envClient {
	return &envClient{starts: map[string]any{}, outcome: map[string]*workflowservice.DescribeWorkflowExecutionResponse{}, failure: map[string]error{}}
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
	d, ok := c.outcome[id]
	if !ok {
		return nil, fmt.Errorf("envClient: no run of %s", id)
	}
	return d, nil
}

func (c *envClient) GetWorkflow(_ context.Context, id, runID string) client.WorkflowRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return failedRun{id: id, runID: runID, err: c.failure[id]}
}

// fail makes id's latest run one that failed with err.
func (c *envClient) fail(id, runID string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcome[id] = &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Status:    enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
	}}
	c.failure[id] = err
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
