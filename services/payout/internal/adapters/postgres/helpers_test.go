package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// migratedPool is a database of its own with payout's schema migrated.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	if err := pg.Migrate(context.Background(), pool, Schema, migrations.For(Schema)); err != nil {
		t.Fatal(err)
	}
	return pool
}
