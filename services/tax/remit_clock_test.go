package tax

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/tax/internal/app"
)

// lockWaitingStore tells when a run asks for the runs' lock.
type lockWaitingStore struct {
	*hookedStore
	beforeLockRuns func()
}

func (h *lockWaitingStore) LockRuns(ctx context.Context) (app.Fence, func(), error) {
	if h.beforeLockRuns != nil {
		h.beforeLockRuns()
	}
	return h.hookedStore.LockRuns(ctx)
}

// A run that waits for the runs' lock reads the clock once it holds it:
// the times it records (its remittances' created_at and remitted_at, its
// run's completed_at) are those of its writes. Read before the wait, they
// were as old as the wait was long: March's run, waiting two hours behind
// February's, recorded its remittance made, posted and its month completed
// at the instant it was asked, two hours before it could write anything.
// (The month is the request's and the cut-off of its withholdings the
// month's end: neither reads the clock.)
func TestRemitTaxReadsTheClockOnceItHoldsTheLock(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00 on 20 February
	clk.Set(time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC))
	compute(t, s, "p-2", "1000.00", "0.20", "individual", "k2") // 160.00 on 20 March
	asked := time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC)
	held := asked.Add(2 * time.Hour) // when February's run lets the lock go
	clk.Set(asked)
	var first atomic.Bool
	var b app.Remitted
	var errB error
	bDone, bWaits := make(chan struct{}), make(chan struct{})
	hooked := &hookedStore{Store: s.app.Store}
	st := &lockWaitingStore{hookedStore: hooked}
	hooked.beforeRecordRun = func(string) {
		if !first.CompareAndSwap(false, true) {
			return
		}
		// February's run holds the lock; March's is asked for now and
		// waits for it, two hours.
		st.beforeLockRuns = func() { close(bWaits) }
		go func() { defer close(bDone); b, errB = s.app.RemitTax(context.Background(), "2026-03", 10) }()
		<-bWaits
		clk.Set(held)
	}
	s.app.Store = st
	if _, err := s.app.RemitTax(context.Background(), "2026-02", 10); err != nil {
		t.Fatal(err)
	}
	<-bDone
	if errB != nil || len(b.Remittances) != 1 {
		t.Fatalf("March's run answered %v, %v; want one remittance", appRemIDs(b.Remittances), errB)
	}
	var febDone, marDone time.Time
	if err := s.d.Pool.QueryRow(context.Background(), `select (select completed_at from tax.remittance_runs where period = '2026-02'),
		(select completed_at from tax.remittance_runs where period = '2026-03')`).Scan(&febDone, &marDone); err != nil {
		t.Fatal(err)
	}
	r := b.Remittances[0]
	if !r.CreatedAt.Equal(held) || r.RemittedAt == nil || !r.RemittedAt.Equal(held) || !marDone.Equal(held) {
		t.Fatalf("March's run, asked at %s and holding the lock from %s (February's run completed at %s), recorded %s created at %s, "+
			"remitted at %v, its run completed at %s; want each at %s", asked.Format(time.RFC3339), held.Format(time.RFC3339),
			febDone.UTC().Format(time.RFC3339), r.ID, r.CreatedAt.UTC().Format(time.RFC3339), r.RemittedAt,
			marDone.UTC().Format(time.RFC3339), held.Format(time.RFC3339))
	}
}
