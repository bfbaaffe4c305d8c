package settlement

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Every settle-{cycle} production starts waits for the cycle's close: its
// End plus the grace (DESIGN §5: 24 h), not its End. The daily opener
// starts the current and the next cycle (StartCycleWorkflow) and reruns a
// closing one (RerunCycleWorkflow); a cycle's run starts the next one
// (StartNextCycle). Each input is checked against the close worked out
// from the default calendar by hand (anchor 2026-01-01, 45 days):
// cyc-20260101 ends Feb 15, cyc-20260215 Apr 1, cyc-20260401 May 16. A
// start closing at End settled every cycle a day early, its grace day's
// usage left out.
func TestCycleInputsCloseAfterTheGrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tc := newEnvClient()
	f.s.tc, f.s.api.Temporal, f.s.acts.Temporal = tc, tc, tc
	ctx := context.Background()
	closes := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

	// cyc-20260101 closing (its run failed, say) and the clock in
	// cyc-20260215: the opener reruns the first and starts the current and
	// the next.
	if _, err := f.s.store.EnsureCycle(ctx, cycle1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.store.BeginClose(ctx, cycle1.ID, "test", cycle1.Closes); err != nil {
		t.Fatal(err)
	}
	f.clock.Set(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	ids, err := f.s.acts.EnsureCycleWorkflows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{
		"cyc-20260101": closes(2026, 2, 16), // rerun (closing)
		"cyc-20260215": closes(2026, 4, 2),  // current
		"cyc-20260401": closes(2026, 5, 17), // next
	}
	for cycle, at := range want {
		id := domain.CycleWorkflowID(cycle)
		in, ok := tc.started(id)
		if !ok {
			t.Errorf("the opener started %v, not %s", ids, id)
			continue
		}
		if in.CycleID != cycle || !in.ClosesAt.Equal(at) {
			t.Errorf("%s started as %s closing at %s, want %s (End + 24 h)", id, in.CycleID, in.ClosesAt, at)
		}
	}

	// The run of cyc-20260401 starts cyc-20260516's (ends Jun 30).
	if err := f.s.acts.StartNextCycle(ctx, "cyc-20260401"); err != nil {
		t.Fatal(err)
	}
	in, ok := tc.started(domain.CycleWorkflowID("cyc-20260516"))
	if !ok {
		t.Fatalf("StartNextCycle(cyc-20260401) started no %s", domain.CycleWorkflowID("cyc-20260516"))
	}
	if at := closes(2026, 7, 1); in.CycleID != "cyc-20260516" || !in.ClosesAt.Equal(at) {
		t.Errorf("next cycle started as %s closing at %s, want cyc-20260516 closing at %s (End + 24 h)", in.CycleID, in.ClosesAt, at)
	}
}
