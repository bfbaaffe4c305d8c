package testkit

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// StoredFixtureKey is the key a kept benchmark fixture database records in
// public.bench_fixture once its build finished, "" when there is none: no
// database named db on the server admin is connected to, or a build that
// did not finish (no table or no key yet). dsn reaches db. The history and report
// benches rebuild their fixture when the key differs from the one their
// shape makes.
func StoredFixtureKey(t testing.TB, admin *pgx.Conn, db, dsn string) string {
	t.Helper()
	ctx := context.Background()
	var exists bool
	if err := admin.QueryRow(ctx, `select exists (select 1 from pg_database where datname = $1)`, db).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return ""
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var table bool
	if err := c.QueryRow(ctx, `select to_regclass('public.bench_fixture') is not null`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	if !table {
		return ""
	}
	var key string
	if err := c.QueryRow(ctx, `select coalesce((select key from public.bench_fixture limit 1), '')`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}
