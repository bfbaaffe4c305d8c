package testkit

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/pg"
)

// GenericPlanPool is a pool of one connection to pool's database whose
// prepared statements are planned generically from their first run
// (plan_cache_mode = force_generic_plan): the plan Postgres keeps for a
// statement after its fifth run on a connection when the generic plan's
// estimate is the cheaper, and then runs every time until the connection
// ends (up to an hour in a pool: pgxpool's default lifetime). Closed when t
// ends.
func GenericPlanPool(t testing.TB, ctx context.Context, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	dsn, err := url.Parse(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	q := dsn.Query()
	q.Set("plan_cache_mode", "force_generic_plan") // a run-time parameter of the connection
	dsn.RawQuery = q.Encode()
	generic, err := pg.Open(ctx, dsn.String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(generic.Close)
	return generic
}

// HeapPagesRead is how many pages of table's heap (schema.table) run read,
// from shared buffers or outside them, run's statements all on on's one
// connection. A backend reports its counts when it goes idle, at most once
// a second unless asked: on is asked (pg_stat_force_next_flush), and the
// counts are read on pool once they have not moved for over a second (other
// connections, such as a test's setup, report within one).
func HeapPagesRead(t testing.TB, ctx context.Context, pool, on *pgxpool.Pool, schema, table string, run func()) int64 {
	t.Helper()
	return statRead(t, ctx, pool, on, schema+"."+table, `select coalesce(heap_blks_hit + heap_blks_read, 0) from pg_statio_user_tables
		where schemaname = $1 and relname = $2`, schema, table, run)
}

// IndexTuplesRead is how many entries of index (schema.index) run's index
// scans read, run's statements all on on's one connection, counted as
// HeapPagesRead counts.
func IndexTuplesRead(t testing.TB, ctx context.Context, pool, on *pgxpool.Pool, schema, index string, run func()) int64 {
	t.Helper()
	return statRead(t, ctx, pool, on, schema+"."+index, `select coalesce(idx_tup_read, 0) from pg_stat_user_indexes
		where schemaname = $1 and indexrelname = $2`, schema, index, run)
}

// statRead is how much the statistic query (of schema and name) reads grew
// over run, read once it has not moved for over a second after on was
// asked to report.
func statRead(t testing.TB, ctx context.Context, pool, on *pgxpool.Pool, what, query, schema, name string, run func()) int64 {
	t.Helper()
	read := func() int64 {
		t.Helper()
		if _, err := on.Exec(ctx, `select pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		n, same := int64(-1), 0
		for tries := 0; same < 12; tries++ {
			if tries == 100 {
				t.Fatalf("the counts of %s never settled", what)
			}
			time.Sleep(100 * time.Millisecond)
			var got int64
			if err := pool.QueryRow(ctx, query, schema, name).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == n {
				same++
			} else {
				n, same = got, 0
			}
		}
		return n
	}
	before := read()
	run()
	return read() - before
}
