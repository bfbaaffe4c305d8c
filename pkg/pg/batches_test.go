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
