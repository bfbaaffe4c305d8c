package postgres

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// A listing reads payouts, histories and statements in one snapshot: read
// in three statements, a status change committed between them answered a
// payout whose status its own last history entry contradicted.
func TestListPayoutsOneSnapshot(t *testing.T) {
	t.Parallel()
	pool := migratedPool(t)
	ctx := context.Background()
	s := &Store{Pool: pool}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, created_at, updated_at) values ('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', now(), now());
		insert into payout.status_history (payout_id, seq, status) values ('po-1', 1, 'created')`); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		statuses := []string{"submitted", "created"}
		for i := 2; !stop.Load(); i++ {
			st := statuses[i%2]
			if _, err := pool.Exec(ctx, `with h as (insert into payout.status_history (payout_id, seq, status) values ('po-1', $1, $2))
				update payout.payouts set status = $2 where payout_id = 'po-1'`, i, st); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	bad := 0
	for range 400 {
		ps, err := s.ListPayouts(ctx, "p-1", "", "", app.PayoutsPosition{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if h := ps[0].History; ps[0].Status != h[len(h)-1].Status {
			bad++
		}
	}
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Errorf("%d of 400 listings answered a status its last history entry contradicts", bad)
	}
}
