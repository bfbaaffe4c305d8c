package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
)

// priorPutKYC is the kyc upsert of the version before payout/0034
// (efb848d0's PutKYC), word for word: a replica of it still serves while
// the migration runs in a rolling upgrade.
const priorPutKYC = `insert into payout.kyc (provider_id, status, reference, updated_at) values ($1, $2, $3, $4)
			on conflict (provider_id) do update set status = excluded.status, reference = excluded.reference, updated_at = excluded.updated_at
			where not $5 or payout.kyc.status <> 'rejected'`

// gooseOn is payout's migrations on pool, to step down and up.
func gooseOn(t *testing.T, pool *pgxpool.Pool) *goose.Provider {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	store, err := database.NewStore(database.DialectPostgres, "payout.goose_db_version")
	if err != nil {
		t.Fatal(err)
	}
	mig, err := goose.NewProvider("", db, migrations.For(Schema), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return mig
}

// A replica of the version before payout/0034 writes a KYC without
// rejected_at: its writes of a rejection (finance stopping a provider),
// of a rejected provider verified again, and of a first KYC that is a
// rejection failed on kyc_rejected_at, and the stop never happened. The
// trigger keeps rejected_at right for it: set on the first save of a
// rejection, kept while rejected, cleared otherwise.
func TestKYCWrittenByAnEarlierVersionAfter0034(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	put := func(provider, status string, at time.Time) {
		t.Helper()
		if _, err := pool.Exec(ctx, priorPutKYC, provider, status, "ref "+status, at, false); err != nil {
			t.Fatalf("the earlier version's KYC write of %s %s: %v", provider, status, err)
		}
	}
	rejectedAt := func(provider string) *time.Time {
		t.Helper()
		var at *time.Time
		if err := pool.QueryRow(ctx, `select rejected_at from payout.kyc where provider_id = $1`, provider).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	want := func(provider string, at *time.Time) {
		t.Helper()
		got := rejectedAt(provider)
		if (got == nil) != (at == nil) || (got != nil && !got.Equal(*at)) {
			t.Fatalf("%s: rejected_at %v, want %v", provider, got, at)
		}
	}

	put("p-a", "verified", t0)
	want("p-a", nil)
	put("p-a", "rejected", t0.Add(time.Hour)) // finance rejects
	first := t0.Add(time.Hour)
	want("p-a", &first)
	put("p-a", "rejected", t0.Add(2*time.Hour)) // saved again: no new rejection
	want("p-a", &first)
	put("p-a", "verified", t0.Add(3*time.Hour)) // verified again
	want("p-a", nil)
	put("p-a", "rejected", t0.Add(4*time.Hour)) // rejected anew
	again := t0.Add(4 * time.Hour)
	want("p-a", &again)

	put("p-b", "rejected", t0) // a first KYC that is a rejection
	want("p-b", &t0)
	put("p-b", "pending", t0.Add(time.Hour))
	want("p-b", nil)

	// This version's PutKYC agrees with it.
	s := &Store{Pool: pool}
	if _, _, err := s.PutKYC(ctx, "p-c", "rejected", "sanctions", false, t0); err != nil {
		t.Fatal(err)
	}
	want("p-c", &t0)
	if _, _, err := s.PutKYC(ctx, "p-c", "rejected", "sanctions, amended", false, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	want("p-c", &t0)
	put("p-c", "rejected", t0.Add(2*time.Hour))
	want("p-c", &t0)
	if _, _, err := s.PutKYC(ctx, "p-c", "verified", "cleared", false, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	want("p-c", nil)

	// Its down migration leaves nothing of it behind.
	if _, err := gooseOn(t, pool).DownTo(ctx, 33); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `select (select count(*) from pg_trigger where tgrelid = 'payout.kyc'::regclass and not tgisinternal)
		+ (select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'payout' and p.proname like '%rejected_at%')`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("after payout/0034's down: %d triggers or functions of it left", left)
	}
	put("p-a", "verified", t0.Add(5*time.Hour))
	if err := pg.Migrate(ctx, pool, Schema, migrations.For(Schema)); err != nil {
		t.Fatal(err)
	}
}
