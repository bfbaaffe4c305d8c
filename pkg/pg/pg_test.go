package pg_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `select exists(select 1 from pg_database where datname=$1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// OpenReadOnly never creates the database: a missing one is ErrNoDatabase,
// named in the message, and still missing afterwards.
func TestOpenReadOnlyNeverCreatesTheDatabase(t *testing.T) {
	u, err := url.Parse(testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	name := "gpubill_missing_" + strings.ToLower(testkit.Name("x")[2:])
	u.Path = "/" + name
	pool, err := pg.OpenReadOnly(context.Background(), u.String(), 1)
	if pool != nil {
		pool.Close()
	}
	if !errors.Is(err, pg.ErrNoDatabase) || !strings.Contains(err.Error(), name) {
		t.Errorf("OpenReadOnly on a missing database: %v; want ErrNoDatabase naming %s", err, name)
	}
	if databaseExists(t, name) {
		t.Errorf("OpenReadOnly created database %s", name)
		conn, err := pgx.Connect(context.Background(), testkit.BaseDSN())
		if err == nil {
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), "drop database "+name); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	}
}

// A read-only pool refuses writes, and RequireSchema tells a migrated
// schema from a missing one.
func TestOpenReadOnlyRefusesWrites(t *testing.T) {
	ctx := context.Background()
	owner, dsn := testkit.NewPool(t)
	if _, err := owner.Exec(ctx, `create schema ledger; create table ledger.goose_db_version (id int)`); err != nil {
		t.Fatal(err)
	}
	pool, err := pg.OpenReadOnly(ctx, dsn, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `create table public.written (id int)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		t.Errorf("write through a read-only pool: %v; want SQLSTATE 25006", err)
	}
	if err := pg.RequireSchema(ctx, pool, "ledger"); err != nil {
		t.Errorf("RequireSchema(ledger) on a migrated schema: %v", err)
	}
	if err := pg.RequireSchema(ctx, pool, "payout"); !errors.Is(err, pg.ErrNoSchema) {
		t.Errorf("RequireSchema(payout) on a database without it: %v; want ErrNoSchema", err)
	}
}

// InSnapshot reads every statement in the snapshot of its first, through a
// pool (which the owner's writes go to as well), and refuses writes: a row
// committed between two reads is seen by neither, and fn cannot write.
func TestInSnapshotReadsOneSnapshotAndRefusesWrites(t *testing.T) {
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	if _, err := pool.Exec(ctx, `create table public.rows (id int); insert into public.rows values (1)`); err != nil {
		t.Fatal(err)
	}
	var before, after int
	err := pg.InSnapshot(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `select count(*) from public.rows`).Scan(&before); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `insert into public.rows values (2)`); err != nil { // committed meanwhile
			return err
		}
		if err := tx.QueryRow(ctx, `select count(*) from public.rows`).Scan(&after); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into public.rows values (3)`)
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		t.Errorf("write in the snapshot: %v; want SQLSTATE 25006", err)
	}
	if before != 1 || after != 1 {
		t.Errorf("counts read in one snapshot around a committed insert: %d then %d; want 1 then 1", before, after)
	}
}
