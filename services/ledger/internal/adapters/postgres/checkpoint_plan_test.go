package postgres

import (
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// checkpointDays of journal, checkpointPerDay postings a day, in created_at
// order (as the writers append them).
const (
	checkpointDays   = 100
	checkpointPerDay = 1000
)

// The balance checkpoints read only the interval of the journal they
// cover, also once Postgres keeps a generic plan of their statements. It
// does after a statement's fifth run on a connection when the generic plan's
// estimate is the cheaper: for the old form of the checkpoint step's count
// on a journal of 2 million postings, 3 631 against 24 384, and its sixth
// run, one day of postings, took 1 348 ms (every heap page read) where the
// form with both bounds took 16 ms. The pool here plans every statement
// generically from its first run. Over a journal of 100 days, the checkpoint
// step's count of one day and a checkpoint one day after the last must each
// read under a tenth of the postings' heap pages: with
// "$1 is null or created_at > $1", each read every page before its upper
// bound (the BRIN scan bounded by that bound only).
func TestCheckpointsReadTheirIntervalUnderAGenericPlan(t *testing.T) {
	ctx, pool, _ := migratedStore(t)
	day0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		select gen_random_uuid(), 0, 'renter:r-' || (i % 500) || ':wallet', 'USD', case when i % 2 = 0 then 'debit' else 'credit' end, 1.25,
			$1::timestamptz + (i * interval '1 day' / $2)
		from generate_series(0, $3 - 1) i`, day0, checkpointPerDay, checkpointDays*checkpointPerDay); err != nil {
		t.Fatal(err)
	}
	// Summarise the BRIN ranges (autovacuum does, in a deployment; the test
	// server runs without it) and count the heap's pages.
	if _, err := pool.Exec(ctx, `vacuum analyze ledger.postings`); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := pool.QueryRow(ctx, `select relpages from pg_class where oid = 'ledger.postings'::regclass`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	generic := testkit.GenericPlanPool(t, ctx, pool)
	r := &Reports{Pool: generic}
	at := func(d int) time.Time { return day0.AddDate(0, 0, d) }

	from, upTo := at(60), at(61)
	var n int64
	var err error
	touched := testkit.HeapPagesRead(t, ctx, pool, generic, "ledger", "postings", func() {
		if n, err = r.PostingsSince(ctx, &from, upTo, 500_000); err != nil {
			t.Fatal(err)
		}
	})
	if n != checkpointPerDay {
		t.Fatalf("%d postings in a day, want %d", n, checkpointPerDay)
	}
	t.Logf("the checkpoint step's count of one day read %d of the journal's %d heap pages", touched, pages)
	if touched > pages/10 {
		t.Fatalf("the checkpoint step's count of one day read %d of the journal's %d heap pages", touched, pages)
	}

	for _, d := range []int{50, 51} { // the interval before the one timed is small too
		if made, err := r.MakeCheckpoint(ctx, at(d)); err != nil || !made {
			t.Fatalf("checkpoint at day %d: made %v, %v", d, made, err)
		}
	}
	touched = testkit.HeapPagesRead(t, ctx, pool, generic, "ledger", "postings", func() {
		if made, err := r.MakeCheckpoint(ctx, at(52)); err != nil || !made {
			t.Fatalf("checkpoint at day 52: made %v, %v", made, err)
		}
	})
	if err := pool.QueryRow(ctx, `select postings from ledger.balance_checkpoints where at = $1`, at(52)).Scan(&n); err != nil || n != checkpointPerDay {
		t.Fatalf("the checkpoint at day 52 counted %d postings (%v), want %d", n, err, checkpointPerDay)
	}
	t.Logf("a checkpoint one day after the last read %d of the journal's %d heap pages", touched, pages)
	if touched > pages/10 {
		t.Fatalf("a checkpoint one day after the last read %d of the journal's %d heap pages", touched, pages)
	}
}
