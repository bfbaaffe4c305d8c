package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// Pending reads the usage waiting for a card page after page, in the order
// it began to wait (then by event id), each row once: the retry reads past
// a page that no card prices.
func TestPendingPages(t *testing.T) {
	ctx := context.Background()
	s := NewStore(testkit.NewMigratedPool(t, Schema, migrations.For(Schema)))
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	add := func(at time.Time, ids ...string) {
		t.Helper()
		var ps []domain.PendingUsage
		for _, id := range ids {
			ps = append(ps, domain.PendingUsage{MessageID: "m-" + id, Reason: "no card", Event: domain.UsageEvent{ID: id, LeaseID: "l-" + id,
				ProviderID: "p-1", RenterID: "r-1", GPUModel: "RTX_4090", GPUCount: 1, Start: t0.Add(-time.Hour), End: t0, Currency: "JPY", CycleID: "cyc-20261112"}})
		}
		if err := s.WithTx(ctx, func(tx app.Tx) error { return tx.AddPending(ctx, ps, at) }); err != nil {
			t.Fatal(err)
		}
	}
	add(t0.Add(time.Second), "e-4", "e-3")
	add(t0, "e-2", "e-5", "e-1")
	var got []string
	var since time.Time
	var after string
	for page := 0; ; page++ {
		rows, lastSince, lastID, err := s.Pending(ctx, since, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if lastID == "" {
			break
		}
		if len(rows) > 2 || page > 3 {
			t.Fatalf("page %d: %d rows", page, len(rows))
		}
		for _, r := range rows {
			got = append(got, r.Event.ID)
		}
		since, after = lastSince, lastID
	}
	if want := "[e-1 e-2 e-5 e-3 e-4]"; fmt.Sprint(got) != want {
		t.Fatalf("pages read %v, want %s", got, want)
	}
}
