package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
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

// A payout failed again while a claim of its settlement outside stands
// (paid in part by hand) cannot be retried (app.Retry). A replica of a
// version before that rule, during a rolling upgrade, moved it to created
// all the same and paid its net again: the database refuses the move.
func TestRetryRefusedByTheDatabaseWhileAClaimStands(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	for _, id := range []string{"po-claimed", "po-free", "po-returned"} {
		sentPayout(t, pool, id, "cyc-"+id, "bank", "")
	}
	if _, err := pool.Exec(ctx, `update payout.payouts set status = case when payout_id = 'po-returned' then 'returned' else 'failed' end`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.settled_outside (payout_id, transaction_id, reason, settled_by, settled_at)
		values ('po-claimed', 'tx-hand-1', 'paid by hand', 'finance', now()), ('po-returned', 'tx-hand-2', 'paid by hand', 'finance', now())`); err != nil {
		t.Fatal(err)
	}
	// The earlier version's retry (its Move), but for the columns.
	retry := `update payout.payouts set status = 'created', status_reason = 'retry (attempt 2)', attempt = attempt + 1, version = version + 1
		where payout_id = $1 and status = $2`
	for _, c := range []struct{ id, from string }{{"po-claimed", "failed"}, {"po-returned", "returned"}} {
		_, err := pool.Exec(ctx, retry, c.id, c.from)
		if err == nil {
			t.Fatalf("%s (%s, a claim standing) moved to created: paid its net again", c.id, c.from)
		}
		if !pg.HasCode(err, SQLStateSettledOutsideStands) {
			t.Fatalf("%s: %v; want SQLSTATE %s", c.id, err, SQLStateSettledOutsideStands)
		}
	}
	if _, err := pool.Exec(ctx, retry, "po-free", "failed"); err != nil {
		t.Fatalf("po-free (no claim) retried: %v", err)
	}
	// Its claim released (reversed), the payout can be retried.
	if _, err := pool.Exec(ctx, `delete from payout.settled_outside where payout_id = 'po-claimed'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, retry, "po-claimed", "failed"); err != nil {
		t.Fatalf("po-claimed, its claim released: %v", err)
	}

	// This version's Move answers it a failed precondition (412), not a 500.
	s := &Store{Pool: pool}
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		p, err := s.Lock(ctx, tx, "po-returned")
		if err != nil {
			return err
		}
		return s.Move(ctx, tx, &p, "created", "retry (attempt 2)", time.Now())
	})
	if !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("Move of po-returned to created, a claim standing: %v; want a failed precondition", err)
	}
	// Its down migration leaves nothing of it behind.
	if _, err := gooseOn(t, pool).DownTo(ctx, 34); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `select (select count(*) from pg_trigger where tgrelid = 'payout.payouts'::regclass and tgname = 'payouts_retry_claim_stands')
		+ (select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'payout' and p.proname = 'refuse_retry_claim_stands')`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("after payout/0035's down: %d of its trigger and function left", left)
	}
	if _, err := pool.Exec(ctx, retry, "po-returned", "returned"); err != nil {
		t.Fatalf("before payout/0035: %v", err)
	}
}
