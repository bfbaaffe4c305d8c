package postgres

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// Statements stored before the ledger withheld an entry's text from lines
// of entries moving another party's accounts carry it still: migration
// 0007 makes every stored line of one entry an "adjustment" with no renter
// (settlement cannot judge here whose entries were the provider's alone),
// and keeps lease lines and the folded remainder as they were.
func TestStoredStatementLinesWithheld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	all := migrations.For(Schema)
	// before: up to 0006; upTo: up to this migration, 0007 (0008 drops the
	// lease of a line two providers' statements name, as both here do).
	before, upTo := fstest.MapFS{}, fstest.MapFS{}
	names, err := fs.Glob(all, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n >= "0008" {
			continue
		}
		b, err := fs.ReadFile(all, n)
		if err != nil {
			t.Fatal(err)
		}
		upTo[n] = &fstest.MapFile{Data: b}
		if n < "0007" {
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	if err := pg.Migrate(ctx, pool, Schema, before); err != nil {
		t.Fatal(err)
	}
	const lines = `[
		{"transaction_id": "", "lease_id": "l-1", "renter_id": "r-1", "gpu_model": "H100", "amount": "100.00", "description": "3 charges"},
		{"transaction_id": "7b1f0c3e-0000-4000-8000-000000000001", "renter_id": "r-secret", "amount": "-1.00",
			"description": "dispute: renter r-secret of p-2 (lease-2) compensated; p-2 pays p-1 for the failover"},
		{"transaction_id": "7b1f0c3e-0000-4000-8000-000000000002", "amount": "0.50"},
		{"transaction_id": "", "amount": "4.00", "description": "3 more lines (3 postings): the journal of the account lists them"}]`
	if _, err := pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ('cyc-20260101', 'settled', now(), now(), now())`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"p-1", "p-2"} {
		if _, err := pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
				commission_rate, commission, tax_withheld, net, lines, settled_at)
			values ('cyc-20260101', $1, 'CNY', 103.50, 'settled', 0.25, 25.88, 15.52, 62.10, $2, now())`, p, lines); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Migrate(ctx, pool, Schema, upTo); err != nil {
		t.Fatal(err)
	}
	s := NewStore(pool)
	for _, p := range []string{"p-1", "p-2"} {
		sts, err := s.ListStatements(ctx, p, "cyc-20260101", nil, 10)
		if err != nil || len(sts) != 1 {
			t.Fatalf("statements of %s: %v, %v", p, sts, err)
		}
		var got []string
		for _, l := range sts[0].Lines {
			got = append(got, strings.Join([]string{l.LeaseID, l.RenterID, l.Amount, l.Description}, " "))
		}
		want := []string{"l-1 r-1 100.00 3 charges", "  -1.00 adjustment", "  0.50 adjustment",
			"  4.00 3 more lines (3 postings): the journal of the account lists them"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s's stored lines %q, want %q", p, got, want)
		}
	}
}
