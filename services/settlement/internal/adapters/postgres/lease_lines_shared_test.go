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

// Statements stored before the ledger summed only charge-shaped credits into
// lease lines carry a line naming another provider's lease and renter where
// finance's entry tagged with them credited the provider (p-2's pending →
// p-1's, lease_id lease-2, renter_id r-secret). Settlement cannot read the
// ledger, so it cannot tell whose lease it was; what it can see is a lease
// named by the stored statements of two providers. Migration 0008 drops the
// lease, renter, GPU model and hours from every such line (both providers':
// which one owns the lease is the ledger's to know) and keeps its amount and
// count; a lease named by one provider's statements only (in two cycles
// here) stays as it was.
func TestStoredLeaseLinesOfTwoProvidersWithheld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	all := migrations.For(Schema)
	before := fstest.MapFS{}
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
		before[n] = &fstest.MapFile{Data: b}
	}
	if err := pg.Migrate(ctx, pool, Schema, before); err != nil {
		t.Fatal(err)
	}
	stored := []struct{ cycle, provider, lines string }{
		{"cyc-20260101", "p-1", `[
			{"transaction_id": "", "lease_id": "l-1", "renter_id": "r-1", "gpu_model": "H100", "gpu_hours": "30", "amount": "100.00", "description": "3 charges"},
			{"transaction_id": "", "lease_id": "lease-2", "renter_id": "r-secret", "gpu_model": "H100", "gpu_hours": "2", "amount": "1.00", "description": "1 charge"},
			{"transaction_id": "7b1f0c3e-0000-4000-8000-000000000001", "amount": "0.50", "description": "adjustment"}]`},
		{"cyc-20260101", "p-2", `[
			{"transaction_id": "", "lease_id": "lease-2", "renter_id": "r-secret", "gpu_model": "H100", "gpu_hours": "20", "amount": "50.00", "description": "2 charges"},
			{"transaction_id": "", "lease_id": "l-3", "renter_id": "r-3", "amount": "7.00", "description": "1 charge"},
			{"transaction_id": "7b1f0c3e-0000-4000-8000-000000000001", "amount": "-1.00", "description": "adjustment"}]`},
		{"cyc-20260201", "p-2", `[
			{"transaction_id": "", "lease_id": "lease-2", "renter_id": "r-secret", "gpu_model": "H100", "gpu_hours": "10", "amount": "25.00", "description": "1 charge"},
			{"transaction_id": "", "lease_id": "l-3", "renter_id": "r-3", "amount": "5.00", "description": "1 charge"}]`},
	}
	for _, c := range []string{"cyc-20260101", "cyc-20260201"} {
		if _, err := pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
			values ($1, 'settled', now(), now(), now())`, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stored {
		if _, err := pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
				commission_rate, commission, tax_withheld, net, lines, settled_at)
			values ($1, $2, 'CNY', 100, 'settled', 0.25, 25, 15, 60, $3, now())`, s.cycle, s.provider, s.lines); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Migrate(ctx, pool, Schema, all); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give [2]string // cycle, provider
		want []string  // lines: lease, renter, GPU model, hours, amount, description
	}{
		{[2]string{"cyc-20260101", "p-1"}, []string{"l-1 r-1 H100 30 100.00 3 charges", "    1.00 1 charge", "    0.50 adjustment"}},
		{[2]string{"cyc-20260101", "p-2"}, []string{"    50.00 2 charges", "l-3 r-3   7.00 1 charge", "    -1.00 adjustment"}},
		{[2]string{"cyc-20260201", "p-2"}, []string{"    25.00 1 charge", "l-3 r-3   5.00 1 charge"}},
	}
	s := NewStore(pool)
	for _, tt := range tests {
		sts, err := s.ListStatements(ctx, tt.give[1], tt.give[0], nil, 10)
		if err != nil || len(sts) != 1 {
			t.Fatalf("statements of %s in %s: %v, %v", tt.give[1], tt.give[0], sts, err)
		}
		var got []string
		for _, l := range sts[0].Lines {
			got = append(got, strings.Join([]string{l.LeaseID, l.RenterID, l.GPUModel, l.GPUHours, l.Amount, l.Description}, " "))
		}
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%v's stored lines %q, want %q", tt.give, got, tt.want)
		}
	}
}
