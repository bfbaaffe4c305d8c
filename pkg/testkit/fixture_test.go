package testkit_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestStoredFixtureKey: no database, a database without the table, the
// table without a key (a build cut off) all read as ""; the key once set.
func TestStoredFixtureKey(t *testing.T) {
	ctx := context.Background()
	dsn := testkit.NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := u.Path[1:]
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	if got := testkit.StoredFixtureKey(t, admin, db+"_none", dsn); got != "" {
		t.Fatalf("no database: key %q, want none", got)
	}
	if got := testkit.StoredFixtureKey(t, admin, db, dsn); got != "" {
		t.Fatalf("no table: key %q, want none", got)
	}
	if _, err := admin.Exec(ctx, `create table public.bench_fixture (key text not null)`); err != nil {
		t.Fatal(err)
	}
	if got := testkit.StoredFixtureKey(t, admin, db, dsn); got != "" {
		t.Fatalf("empty table: key %q, want none", got)
	}
	if _, err := admin.Exec(ctx, `insert into public.bench_fixture values ('shape-1')`); err != nil {
		t.Fatal(err)
	}
	if got := testkit.StoredFixtureKey(t, admin, db, dsn); got != "shape-1" {
		t.Fatalf("key %q, want shape-1", got)
	}
}
