package pg_test

import (
	"context"
	"errors"
	"fmt"
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

// keywordDSN is base's server and user in keyword/value form, naming
// database and carrying password.
func keywordDSN(t *testing.T, base, database, password string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
		cfg.Host, cfg.Port, cfg.User, password, database)
}

// dropDatabase drops name on the test server, if it exists.
func dropDatabase(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)"); err != nil {
		t.Errorf("drop %s: %v", name, err)
	}
}

// A keyword/value DATABASE_URL (host=… dbname=…) opens as a URL does,
// creating the missing database; an unreachable server's error names the
// server and database but never the password.
func TestEnsureDatabaseKeywordDSN(t *testing.T) {
	ctx := context.Background()
	name := "gpubill_kw_" + strings.ToLower(testkit.Name("x")[2:])
	t.Cleanup(func() { dropDatabase(t, name) })
	pool, err := pg.Open(ctx, keywordDSN(t, testkit.BaseDSN(), name, "unused"), 1)
	if err != nil {
		t.Errorf("Open with a keyword/value DSN: %v", err)
	} else {
		pool.Close()
	}
	if !databaseExists(t, name) {
		t.Errorf("Open with a keyword/value DSN did not create database %s", name)
	}

	const password = "s3cr3t-pass"
	unreachable := fmt.Sprintf("host=127.0.0.1 port=1 user=postgres password=%s dbname=gpubill sslmode=disable connect_timeout=5", password)
	err = pg.EnsureDatabase(ctx, unreachable)
	if err == nil {
		t.Fatal("EnsureDatabase on port 1 succeeded")
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("EnsureDatabase error carries the password: %v", err)
	}
	if !strings.Contains(err.Error(), "gpubill") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("EnsureDatabase error %q; want it to name the database and host", err)
	}
}

// A role that may connect to its own database but not to the maintenance
// database "postgres" (PgBouncer listing only the service's database, or
// CONNECT revoked) opens its database: "postgres" is only for creating a
// missing one.
func TestOpenNeedsNoMaintenanceDatabaseWhenTheTargetExists(t *testing.T) {
	ctx := context.Background()
	base := testkit.NewCluster(t) // its own server: CONNECT on postgres is revoked from PUBLIC
	admin, err := pgx.Connect(ctx, base+"/postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, stmt := range []string{
		`create role app login`,
		`create database app owner app`,
		`revoke connect on database postgres from public`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("app")
	u.Path = "/app"
	pool, err := pg.Open(ctx, u.String(), 1)
	if err != nil {
		t.Fatalf("Open of an existing database as a role without CONNECT on postgres: %v", err)
	}
	pool.Close()
}
