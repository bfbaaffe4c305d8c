package svc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpubill/gpubill/pkg/server"
)

type plainService struct{ Service }

type temporalService struct{ Service }

func (temporalService) ReadyChecks() []server.Check {
	return []server.Check{{Name: "temporal", Check: func(context.Context) error { return errors.New("frontend down") }}}
}

// A service run alone answers /readyz with the database, NATS and its own
// checks (payout's and settlement's Temporal frontend): they reported ready
// with Temporal down, while closing a cycle or paying out failed.
func TestReadinessHasTheServicesOwnChecks(t *testing.T) {
	ok := func(context.Context) error { return nil }
	names := func(cs []server.Check) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if got := names(readiness(ok, ok, plainService{})); len(got) != 2 || got[0] != "database" || got[1] != "nats" {
		t.Errorf("plain service: %v", got)
	}
	cs := readiness(ok, ok, temporalService{})
	if got := names(cs); len(got) != 3 || got[2] != "temporal" || cs[2].Check(context.Background()) == nil {
		t.Errorf("a service with its own check: %v", got)
	}
}

// A service stopped (SIGTERM, SIGHUP) during a start-up step (settlement
// starting its cycle workflows) returned that step's context error: the
// drain asked for exited 1, "exit" logged as an error. Once stopped, an
// error of the stop is none; any other is still the failure it is.
func TestStoppedDuringStartUpIsNoFailure(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := fmt.Errorf("start cycle workflows: unsettled cycles: %w", context.Canceled)
	failed := errors.New("start cycle workflows: connection refused")
	tests := []struct {
		name string
		ctx  context.Context
		give error
		want error
	}{
		{"stopped, the step canceled", done, canceled, nil},
		{"stopped, the step failed", done, failed, failed},
		{"running, a context canceled", context.Background(), canceled, canceled},
	}
	for _, tt := range tests {
		if got := stopped(tt.ctx, tt.give); !errors.Is(got, tt.want) || (tt.want == nil) != (got == nil) {
			t.Errorf("%s: %v; want %v", tt.name, got, tt.want)
		}
	}
}
