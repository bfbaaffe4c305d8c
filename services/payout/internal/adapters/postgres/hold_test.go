package postgres

import (
	"context"
	"slices"
	"testing"
	"time"
)

// A hold locks the provider's payouts before it reads them, so a gate that
// holds a payout's lock (it read the holds, and marks the payout
// submitting) is waited for and its payout answered in flight, not waiting:
// the hold was answered as applying to a payout the gate had just passed.
func TestHoldWaitsForTheGate(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	for i, id := range []string{"po-h1", "po-h2"} {
		if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
				method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
			values ($1, 'p-h', $2, 'CNY', 1000, 250, 150, 600, 'action_required', 'bank', '', '', true, 1, now(), now())`, id, []string{"cyc-20260101", "cyc-20260215"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	gate, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Exec(ctx, `select 1 from payout.payouts where payout_id = 'po-h1' for update`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		waiting, inFlight []string
		err               error
	}
	held := make(chan answer, 1)
	go func() {
		w, f, err := s.PutHold(ctx, "p-h", "dispute", time.Now())
		held <- answer{w, f, err}
	}()
	time.Sleep(300 * time.Millisecond) // the hold waits on po-h1's lock meanwhile
	if _, err := gate.Exec(ctx, `update payout.payouts set status = 'created', submitting = true where payout_id = 'po-h1'`); err != nil {
		t.Fatal(err)
	}
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || !slices.Equal(a.waiting, []string{"po-h2"}) || !slices.Equal(a.inFlight, []string{"po-h1"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-h2 waiting, po-h1 in flight", a.waiting, a.inFlight, a.err)
	}
}
