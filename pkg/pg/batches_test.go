package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// batchCallers runs n callers of b at once, caller i inserting key i and
// reading back what it wrote; it returns each caller's answer and error.
func batchCallers(t *testing.T, b *pg.Batches, n int, key func(i int) string) ([]string, []error) {
	t.Helper()
	got, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Do(context.Background(), func(batch *pgx.Batch) {
				got[i] = ""
				batch.Queue(`insert into batched (k) values ($1) returning k || '!'`, key(i)).QueryRow(func(r pgx.Row) error {
					return r.Scan(&got[i])
				})
			})
		}()
	}
	wg.Wait()
	return got, errs
}

// batchMetrics reads the batches named name's metrics: batches sent (each
// caller's resend not counted), calls in them, batches resent.
func batchMetrics(t *testing.T, name string) (batches uint64, calls float64, resent float64) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != name {
				continue
			}
			switch mf.GetName() {
			case "gpubill_pg_batch_calls":
				batches, calls = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case "gpubill_pg_batch_resent_total":
				resent = m.GetCounter().GetValue()
			}
		}
	}
	return batches, calls, resent
}

// Callers that arrive within the linger share one batch, so one
// transaction (their rows have one xmin), and each reads its own result.
// When a statement fails, the shared batch is sent again one caller at a
// time: the failing caller gets its error, the others their rows.
func TestBatchesShareATransactionAndAnswerEachCaller(t *testing.T) {
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	if _, err := pool.Exec(ctx, `create table batched (k text primary key check (k <> 'bad'))`); err != nil {
		t.Fatal(err)
	}
	b := pg.NewBatches(pool, "test_share", 64, 300*time.Millisecond)
	xmins := func(prefix string) (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `select count(distinct xmin::text) from batched where k like $1 || '%'`, prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	got, errs := batchCallers(t, b, 20, func(i int) string { return fmt.Sprintf("a%02d", i) })
	for i := range got {
		if want := fmt.Sprintf("a%02d!", i); errs[i] != nil || got[i] != want {
			t.Fatalf("caller %d: %q, %v; want %q", i, got[i], errs[i], want)
		}
	}
	if n := xmins("a"); n != 1 {
		t.Fatalf("20 callers within the linger wrote in %d transactions, want 1", n)
	}
	if batches, calls, resent := batchMetrics(t, "test_share"); batches != 1 || calls != 20 || resent != 0 {
		t.Fatalf("metrics: %d batches of %.0f calls, %.0f resent; want 1 of 20, none resent", batches, calls, resent)
	}

	got, errs = batchCallers(t, b, 10, func(i int) string {
		if i == 3 {
			return "bad"
		}
		return fmt.Sprintf("b%02d", i)
	})
	for i := range got {
		var pgErr *pgconn.PgError
		switch {
		case i == 3 && (!errors.As(errs[i], &pgErr) || pgErr.Code != "23514"):
			t.Fatalf("the failing caller got %v, want its check violation", errs[i])
		case i != 3 && (errs[i] != nil || got[i] != fmt.Sprintf("b%02d!", i)):
			t.Fatalf("caller %d beside a failing one: %q, %v", i, got[i], errs[i])
		}
	}
	if n := xmins("b"); n != 9 {
		t.Fatalf("beside a failing caller, 9 rows were written in %d transactions, want 9 (one each)", n)
	}
	if batches, calls, resent := batchMetrics(t, "test_share"); batches != 2 || calls != 30 || resent != 1 {
		t.Fatalf("metrics: %d batches of %.0f calls, %.0f resent; want 2 of 30, one resent", batches, calls, resent)
	}
}

// A caller whose context ends stops waiting for its group (the caller
// that runs the group waits for it: at most the linger and the batch).
func TestBatchesCallerStopsWaitingWhenItsContextEnds(t *testing.T) {
	pool, _ := testkit.NewPool(t)
	b := pg.NewBatches(pool, "test_ctx", 64, 2*time.Second)
	runner := make(chan error, 1)
	go func() { runner <- b.Do(context.Background(), func(batch *pgx.Batch) { batch.Queue(`select 1`) }) }()
	time.Sleep(100 * time.Millisecond) // the first caller runs the group: it lingers
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Do(ctx, func(batch *pgx.Batch) { batch.Queue(`select 1`) })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("Do returned %v after %s, want the context's deadline at once", err, time.Since(start))
	}
	if err := <-runner; err != nil {
		t.Fatalf("the group's runner: %v", err)
	}
}

// A statement blocked on a lock is given up by the server within the
// batch's server timeout, so the group's transaction ends and releases
// what it took: every caller of the group gets the error (none is resent
// alone, each would wait on the lock again) and nothing of the batch is
// left running or holding locks. With only the client's timeout, the
// server went on running the blocked statement after the client had given
// up, holding the row the group had updated before it.
func TestBatchesGiveUpABlockedStatementOnTheServer(t *testing.T) {
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	if _, err := pool.Exec(ctx, `create table locked (k text primary key, n int not null);
		insert into locked values ('a', 0), ('b', 0), ('c', 0)`); err != nil {
		t.Fatal(err)
	}
	defer pg.SetBatchTimeouts(1500*time.Millisecond, 300*time.Millisecond)()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `update locked set n = 1 where k = 'b'`); err != nil {
		t.Fatal(err)
	}

	b := pg.NewBatches(pool, "test_blocked", 64, 200*time.Millisecond)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	start := time.Now()
	for i, k := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i > 0 {
				time.Sleep(20 * time.Millisecond) // "a" first: its update is in the group before the blocked one
			}
			errs[i] = b.Do(ctx, func(batch *pgx.Batch) { batch.Queue(`update locked set n = n + 10 where k = $1`, k) })
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "55P03" && pgErr.Code != "57014") {
			t.Fatalf("caller %d: %v after %s, want the server's lock or statement timeout (55P03, 57014)", i, err, took)
		}
	}
	if _, _, resent := batchMetrics(t, "test_blocked"); resent != 0 {
		t.Fatalf("%.0f batches resent, want none (a lock wait given up is no caller's own error)", resent)
	}
	// Nothing of the batch is left on the server: no statement waiting, and
	// the row the group updated before the blocked one is free.
	var waiting int
	if err := pool.QueryRow(ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and query like 'update locked set n = n + 10%' and state = 'active'`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 {
		t.Fatalf("%d of the batch's statements still running on the server after every caller was answered", waiting)
	}
	free, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer free.Rollback(ctx)
	if _, err := free.Exec(ctx, `set local lock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := free.Exec(ctx, `update locked set n = n where k = 'a'`); err != nil {
		t.Fatalf("row a, which the failed group updated, is still locked: %v", err)
	}
	var sum int
	if err := pool.QueryRow(ctx, `select sum(n) from locked`).Scan(&sum); err != nil || sum != 0 {
		t.Fatalf("sum %d (%v): the failed group changed something", sum, err)
	}
}

// A caller whose group has run gets the group's answer even if its context
// ended: the caller that runs the group (the first on a queue with none
// running) returns only once it has, with both its group and its context
// done, and answered at random between the two it reported half of the
// committed writes as failed. (A caller whose context ends while another
// runs its group stops waiting, and gets the context's error.)
func TestBatchesAnswerARunGroupOverAnEndedContext(t *testing.T) {
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	if _, err := pool.Exec(ctx, `create table ran (k int primary key)`); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 40 {
		b := pg.NewBatches(pool, "test_ran", 64, 0) // a queue of its own: this caller runs the group
		if err := b.Do(ended, func(batch *pgx.Batch) { batch.Queue(`insert into ran values ($1)`, i) }); err != nil {
			t.Fatalf("insert %d: Do answered %v", i, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `select count(*) from ran`).Scan(&n); err != nil || n != 40 {
		t.Fatalf("%d rows (%v), want 40", n, err)
	}
}
