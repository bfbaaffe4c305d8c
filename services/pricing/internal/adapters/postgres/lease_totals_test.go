package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// newStore is pricing's store on a fresh, migrated database.
func newStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(testkit.NewMigratedPool(t, Schema, migrations.For("pricing")))
}

// Lease states are copied in the first time and updated after; a state
// LeaseTotals did not read is never written over one stored, and one it
// read that is gone by the save fails the save.
func TestLeaseTotalsCopiedThenUpdated(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	at := time.Date(2026, 11, 12, 22, 0, 0, 0, time.UTC)
	a, b := domain.LeaseCurrency{LeaseID: "lease-a", Currency: "CNY"}, domain.LeaseCurrency{LeaseID: "lease-b", Currency: "CNY"}
	total := func(exact, billed string) domain.LeaseTotal {
		return domain.LeaseTotal{ExactPS: decimal.RequireFromString(exact), Billed: decimal.RequireFromString(billed)}
	}
	// saveAfter reads read, runs between (outside the transaction), then saves m.
	saveAfter := func(read []domain.LeaseCurrency, between func(), m map[domain.LeaseCurrency]domain.LeaseTotal) (map[domain.LeaseCurrency]domain.LeaseTotal, error) {
		var before map[domain.LeaseCurrency]domain.LeaseTotal
		err := s.WithTx(ctx, func(tx app.Tx) error {
			var err error
			if before, err = tx.LeaseTotals(ctx, read); err != nil {
				return err
			}
			between()
			return tx.SaveLeaseTotals(ctx, m, at)
		})
		return before, err
	}
	save := func(read []domain.LeaseCurrency, m map[domain.LeaseCurrency]domain.LeaseTotal) (map[domain.LeaseCurrency]domain.LeaseTotal, error) {
		return saveAfter(read, func() {}, m)
	}
	if _, err := save([]domain.LeaseCurrency{a}, map[domain.LeaseCurrency]domain.LeaseTotal{a: total("10188", "2.83")}); err != nil {
		t.Fatal(err)
	}
	before, err := save([]domain.LeaseCurrency{a, b}, map[domain.LeaseCurrency]domain.LeaseTotal{a: total("20376.00", "5.66"), b: total("0.5", "0")})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || !before[a].Billed.Equal(decimal.RequireFromString("2.83")) {
		t.Fatalf("second read %+v, want lease-a's first state", before)
	}
	rows, err := s.Pool.Query(ctx, `select lease_id || ' ' || exact_ps::text || ' ' || billed::text from pricing.lease_totals order by lease_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"lease-a 20376 5.66", "lease-b 0.5 0"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lease_totals %q, want %q", got, want)
	}
	// Written without being read: the stored row is not overwritten.
	if _, err := save(nil, map[domain.LeaseCurrency]domain.LeaseTotal{a: total("1", "0")}); !pg.IsUniqueViolation(err) {
		t.Fatalf("saving an unread stored lease: %v, want the key refusing it", err)
	}
	var billed string
	if err := s.Pool.QueryRow(ctx, `select billed::text from pricing.lease_totals where lease_id = 'lease-a'`).Scan(&billed); err != nil || billed != "5.66" {
		t.Fatalf("lease-a billed %s (%v), want 5.66 kept", billed, err)
	}
	// Read, then deleted by someone else before the save: the update
	// finds no row for it, and the save fails rather than lose the state.
	_, err = saveAfter([]domain.LeaseCurrency{b}, func() {
		if _, err := s.Pool.Exec(ctx, `delete from pricing.lease_totals where lease_id = 'lease-b'`); err != nil {
			t.Fatal(err)
		}
	}, map[domain.LeaseCurrency]domain.LeaseTotal{b: total("1", "0")})
	if err == nil || !strings.Contains(err.Error(), "updated 0 of 1 stored leases") {
		t.Fatalf("saving a lease whose row went away: %v, want the update's count refusing it", err)
	}
}
