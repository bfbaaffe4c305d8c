package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// Claims made before payout/0037 may name one ledger entry in two cases
// (the ledger reads both as one): po-a and po-b by T and UPPER(T), po-c by
// U and UPPER(U). The migration must not fail on them (a unique index on
// lower(transaction_id) would), nor drop a claim (its payout read paid,
// the evidence gone): the earliest claim of each entry keeps the key, each
// later one is marked with the payout holding it, for finance to review.
// After it, a claim of T in any case is a conflict naming po-a.
func TestClaimsInTwoCasesBefore0037AreMarkedNotLost(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	if _, err := gooseOn(t, pool).DownTo(ctx, 36); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"po-a", "po-b", "po-c", "po-d", "po-e"} {
		sentPayout(t, pool, id, "cyc-"+id, "bank", "")
	}
	if _, err := pool.Exec(ctx, `update payout.payouts set status = case when payout_id = 'po-e' then 'failed' else 'settled_outside' end`); err != nil {
		t.Fatal(err)
	}
	const tx, u, v = "0193e0a4-7c1d-7b2e-9f00-5a1b2c3d4e5f", "0193e0a4-7c1d-7b2e-9f00-00000000000a", "0193e0a4-7c1d-7b2e-9f00-00000000000b"
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `insert into payout.settled_outside (payout_id, transaction_id, reason, settled_by, settled_at) values
		('po-b', upper($1), 'by hand', 'fin-1', $4::timestamptz + interval '1 hour'),
		('po-a', $1, 'by hand', 'fin-1', $4),
		('po-c', $2, 'by hand', 'fin-1', $4),
		('po-c', upper($2), 'by hand', 'fin-1', $4 + interval '1 minute'),
		('po-d', upper($3), 'by hand', 'fin-1', $4)`, tx, u, v, t0); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, Schema, migrations.For(Schema)); err != nil {
		t.Fatalf("payout/0037 over claims of one entry in two cases: %v", err)
	}
	var got string
	if err := pool.QueryRow(ctx, `select string_agg(payout_id || ' ' || transaction_id || ' ' || coalesce(case_duplicate_of, '-'), '; '
		order by payout_id, settled_at) from payout.settled_outside`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"po-a " + tx + " -",
		"po-b " + strings.ToUpper(tx) + " po-a",
		"po-c " + u + " -",
		"po-c " + strings.ToUpper(u) + " po-c",
		"po-d " + strings.ToUpper(v) + " -",
	}, "; ")
	if got != want {
		t.Fatalf("claims after payout/0037:\n got %s\nwant %s", got, want)
	}
	s := &Store{Pool: pool}
	claim := func(payout, id string) error {
		return s.Update(ctx, func(x app.Tx) error { return x.ClaimSettledOutside(ctx, payout, id, "by hand", "fin-1", t0) })
	}
	for _, give := range []string{tx, strings.ToUpper(tx), strings.ToUpper(tx[:8]) + tx[8:]} {
		if err := claim("po-e", give); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "po-a") {
			t.Fatalf("po-e claims %s after payout/0037: %v; want a conflict naming po-a", give, err)
		}
	}
	if err := claim("po-e", v); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "po-d") {
		t.Fatalf("po-e claims %s, po-d's (typed in upper case before): %v; want a conflict naming po-d", v, err)
	}
	// po-d's claim, typed in upper case before, is its own in any case:
	// found, not claimed again.
	if err := claim("po-d", v); err != nil {
		t.Fatalf("po-d claims %s again in lower case: %v; want its own claim found", v, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `select count(*) from payout.settled_outside where lower(transaction_id) = $1`, v).Scan(&n); err != nil || n != 1 {
		t.Fatalf("claims of %s in any case: %d (%v), want 1", v, n, err)
	}
	// Down and up again.
	if _, err := gooseOn(t, pool).DownTo(ctx, 36); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, Schema, migrations.For(Schema)); err != nil {
		t.Fatal(err)
	}
}
