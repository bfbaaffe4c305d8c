package pg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"

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
