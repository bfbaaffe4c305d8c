package svc

import (
	"context"
	"errors"
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
