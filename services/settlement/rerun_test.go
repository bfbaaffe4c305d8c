package settlement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// A close request on a closing cycle, or settlement's start-up, while the
// cycle's run is still settling a later page, settles a provider that
// failed on an earlier page once its cause is gone. The run joined (a start
// of a running workflow id is that run) paged forward and never came back:
// the failed provider stayed pending and the cycle closing, while the close
// answered 200 closing. Pages of one provider: p-00000 refused by the
// ledger (it fails), p-00002's posts held back (the ledger down) while the
// refusal is lifted and the rerun asked for, then let through.
func TestRerunAskedDuringARunSettlesAnEarlierFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give string
		ask  func(t *testing.T, f *fixture)
	}{
		{give: "close request", ask: func(t *testing.T, f *fixture) {
			resp, err := f.s.API().CloseSettlementCycle(context.Background(), &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID})
			if err != nil || resp.SettlementCycle.GetStatus() != domain.CycleClosing {
				t.Errorf("close of the closing cycle: %v, %v; want it answered closing", resp, err)
			}
		}},
		{give: "start-up", ask: func(t *testing.T, f *fixture) {
			if err := f.s.StartCycles(context.Background()); err != nil {
				t.Errorf("start-up: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil, WithBatchSize(1))
			tc := newEnvClient()
			f.s.tc, f.s.api.Temporal, f.s.acts.Temporal = tc, tc, tc
			const providers = 3
			f.seed(t, cycle1.ID, providers)
			f.clock.Set(cycle1.End.Add(time.Hour))
			refused, held := domain.SettlementKey(cycle1.ID, "p-00000", "CNY"), domain.SettlementKey(cycle1.ID, "p-00002", "CNY")
			f.ledger.Refuse(refused, status.Error(codes.InvalidArgument, "provider:p-00000:pending would go negative"))
			f.ledger.Refuse(held, status.Error(codes.Unavailable, "ledger down"))

			id := domain.CycleWorkflowID(cycle1.ID)
			asked := ""
			register := func(env *testsuite.TestWorkflowEnvironment) { Register(env, f.s.acts, f.s.d.TaxPeriods) }
			runCycleEach(t, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true, BatchSize: 1}, register,
				func(env *testsuite.TestWorkflowEnvironment, _ int, in app.CycleInput) {
					tc.live(id, env)
					if in.Phase != app.PhaseSettle || in.After != "p-00001" || asked != "" {
						return
					}
					// p-00002's page, its attempts failing and retried.
					env.RegisterDelayedCallback(func() {
						asked = fmt.Sprintf("p-00000 pending %s, p-00002 pending %s, cycle %s",
							f.ledger.Balance(domain.PendingAccount("p-00000", cycle1.ID), "CNY"),
							f.ledger.Balance(domain.PendingAccount("p-00002", cycle1.ID), "CNY"), cycleStatus(t, f))
						f.ledger.Refuse(refused, nil)
						tt.ask(t, f)
					}, 2*time.Second)
					env.RegisterDelayedCallback(func() { f.ledger.Refuse(held, nil) }, 5*time.Second)
				})
			tc.live(id, nil)
			// The rerun was asked for with p-00000 failed and p-00002 in flight.
			if want := "p-00000 pending 1033.33, p-00002 pending 1033.33, cycle closing"; asked != want {
				t.Fatalf("when the rerun was asked for: %q, want %q", asked, want)
			}
			for i := range providers {
				p := fmt.Sprintf("p-%05d", i)
				if b := f.ledger.Balance(domain.PendingAccount(p, cycle1.ID), "CNY"); !b.IsZero() {
					t.Errorf("%s pending = %s after the run, want 0", p, b)
				}
			}
			if st := cycleStatus(t, f); st != domain.CycleSettled {
				t.Fatalf("cycle %s after the run, want settled", st)
			}
		})
	}
}
