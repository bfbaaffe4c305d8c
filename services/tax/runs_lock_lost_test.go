package tax

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gpubill/gpubill/services/tax/internal/app"
)

// killRunsLockSession ends the database session holding the remittance
// runs' session lock (pg_terminate_backend), as a killed connection, an
// idle_session_timeout or a lost network does, and fails t unless one
// held it: the kill must prove something.
func killRunsLockSession(t *testing.T, s *Service) {
	t.Helper()
	// An advisory lock on a bigint key shows its high 32 bits as classid
	// and its low ones as objid, objsubid 1 (hashtext's int4, sign-extended).
	var killed int
	err := s.d.Pool.QueryRow(context.Background(), `select count(pg_terminate_backend(pid)) from pg_locks
		where locktype = 'advisory' and granted and objsubid = 1
		  and database = (select oid from pg_database where datname = current_database())
		  and classid::bigint = (hashtext('gpubill.tax.remit.run')::bigint >> 32) & 4294967295
		  and objid::bigint = hashtext('gpubill.tax.remit.run')::bigint & 4294967295`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d sessions holding the runs' lock (%v); want 1", killed, err)
	}
}

// A run whose session lock is lost mid-run (its backend terminated) and a
// second run of the same month that then takes the lock: only one files
// the month. The first had planned February empty (k1 not posted yet)
// and went on to record it; the second, finding the lock free, planned
// February again with k1 posted since: two answers for one month, one
// filing nothing and one 150.00.
func TestRemitTaxRunThatLostItsLockFilesNothing(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	w := record(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00 on 20 February, not posted at the first run's plan
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	var first atomic.Bool
	var b app.Remitted
	var errB error
	s.app.Store = &hookedStore{Store: s.app.Store, beforeRecordRun: func(string) {
		if !first.CompareAndSwap(false, true) {
			return
		}
		// The first run has planned February with nothing posted; the
		// ledger posts k1, the first run's lock session is lost, and a
		// second run takes the lock and runs whole before the first goes on.
		l.settle("k1", w.Jurisdiction, w.Currency, w.TaxWithheld)
		killRunsLockSession(t, s)
		b, errB = s.app.RemitTax(context.Background(), "2026-02", 10)
	}}
	a, errA := s.app.RemitTax(context.Background(), "2026-02", 10)
	if !first.Load() {
		t.Fatal("the first run never reached its record: nothing was killed")
	}
	if errB != nil || !slices.Equal(appRemIDs(b.Remittances), []string{"rem-2026-02-CN-CNY 150.00 remitted"}) {
		t.Fatalf("the second run answered %v, %v; want February filed with k1's 150.00", appRemIDs(b.Remittances), errB)
	}
	if errA == nil || code(errA) != codes.Unavailable {
		t.Fatalf("the run that lost its lock answered %v (code %v) after the second run answered %v; want it to fail unavailable, "+
			"one plan of February answered", appRemIDs(a.Remittances), code(errA), appRemIDs(b.Remittances))
	}
	wantPostedOnce(t, s, l, []string{"150.00"})
}
