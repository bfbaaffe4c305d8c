package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestMigrateConcurrentReplicasOfAFreshSchema: the replicas of a service
// (helm starts 2 at once; here 8) migrating the same fresh schema together
// all succeed, and the migration is applied once. (Were the schema created
// before the migration lock, two sessions could both find it missing and
// one would fail on pg_namespace's unique index, 23505.)
func TestMigrateConcurrentReplicasOfAFreshSchema(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	const replicas, rounds = 8, 5 // a pool of 16: each replica holds one connection for the lock, the migrator a second
	for r := 0; r < rounds; r++ {
		schema := fmt.Sprintf("replicas_%d", r)
		fsys := fstest.MapFS{"0001_x.sql": {Data: []byte("-- +goose Up\ncreate table " + schema + ".x (id int primary key);\n")}}
		start := make(chan struct{})
		var errs [replicas]error
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func(i int) { defer wg.Done(); <-start; errs[i] = pg.Migrate(ctx, pool, schema, fsys) }(i)
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: replica %d: %v", r, i, err)
			}
		}
		var applied int
		if err := pool.QueryRow(ctx, `select count(*) from `+schema+`.goose_db_version where version_id = 1 and is_applied`).Scan(&applied); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if applied != 1 {
			t.Errorf("round %d: migration 1 applied %d times, want once", r, applied)
		}
	}
}

// TestMigrateConcurrentReplicasOfAConcurrentIndex: two replicas migrating
// together through a NO TRANSACTION migration that builds an index
// concurrently (ledger/0033, metering/0003) both finish. create index
// concurrently waits for every older snapshot in the database to end:
// were the waiting replica blocked inside select pg_advisory_lock, its
// statement held a snapshot the build waited for, while it waited for the
// lock the building replica holds on another, idle, connection. Postgres
// sees no cycle and both hung until killed, leaving an invalid index. The
// first migration holds the lock long enough that the second replica is
// waiting before the build begins; the table is empty: the build waits
// for older snapshots whatever the table holds.
func TestMigrateConcurrentReplicasOfAConcurrentIndex(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const schema = "cic"
	fsys := fstest.MapFS{
		"0001_t.sql": {Data: []byte("-- +goose Up\ncreate table cic.t (id int primary key, tags text[] not null);\nselect pg_sleep(1);\n")},
		"0002_t_tags.sql": {Data: []byte("-- +goose NO TRANSACTION\n-- +goose Up\n" +
			"create index concurrently t_tags on cic.t using gin (tags);\n")},
	}
	var errs [2]error
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = pg.Migrate(ctx, pool, schema, fsys) }(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	var valid bool
	if err := pool.QueryRow(context.Background(), `select indisvalid from pg_index where indexrelid = 'cic.t_tags'::regclass`).Scan(&valid); err != nil {
		t.Fatal(err)
	}
	if !valid {
		t.Error("index cic.t_tags left invalid")
	}
}

// TestMigrateWaitingForTheLockEndsWithCtx: a migrator waiting for another
// that holds the migration lock gives up when its ctx ends, with the ctx's
// error, and applies nothing.
func TestMigrateWaitingForTheLockEndsWithCtx(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	holder, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	var locked bool
	if err := holder.QueryRow(context.Background(), `select pg_try_advisory_lock(hashtext('gpubill.migrate.held'))`).Scan(&locked); err != nil || !locked {
		t.Fatalf("take the lock: %v, %v", locked, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	fsys := fstest.MapFS{"0001_x.sql": {Data: []byte("-- +goose Up\ncreate table held.x (id int);\n")}}
	err = pg.Migrate(ctx, pool, "held", fsys)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Migrate while another holds the lock: %v; want context.DeadlineExceeded", err)
	}
	var exists bool
	if err := pool.QueryRow(context.Background(), `select to_regnamespace('held') is not null`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Error("schema held created without the lock")
	}
}
