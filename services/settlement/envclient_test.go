package settlement

import (
	"context"
	"fmt"
	"sync"

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
}

func newEnvClient() *envClient {
	return &envClient{starts: map[string]any{}}
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
