package ports

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// listedPayout is a payout the listing test stores: its id and when it
// was created.
type listedPayout struct {
	id, cycle, currency, status string
	created                     time.Time
}

// legacyPayoutID is an id of a payout made before ids were derived: a
// version 7 UUID of its creation time.
func legacyPayoutID(t *testing.T, at time.Time) string {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return "po_" + u.String()
}

// A provider's payouts list newest created first, whatever their cycles:
// ids sort by cycle (a derived id's first 48 bits are its cycle's first
// day), and listed by id, a payout settled again days late for an old
// cycle (or made before ids were derived, under a random id of its
// creation time) listed below payouts created before it, so a client
// polling page 1 for new payouts never saw it. Paged two at a time, with
// two payouts created at one instant split across a page boundary, the
// listing holds every payout once, in creation order; a page token of the
// id-ordered listing (one value) is a 400 on page_token.
func TestListProviderPayoutsNewestCreatedFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, postgres.Schema, migrations.For(postgres.Schema))
	srv := &Server{Store: &postgres.Store{Pool: pool}, Epoch: "1"}
	day := func(m time.Month, d, h int) time.Time { return time.Date(2026, m, d, h, 0, 0, 0, time.UTC) }
	derived := func(cycle, currency string) string {
		id, err := domain.PayoutID("p-1", cycle, currency)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	legacyAt := day(time.February, 20, 9)
	tie := day(time.March, 3, 12).Add(123456 * time.Microsecond)
	stored := []listedPayout{
		{derived("cyc-20260101", "CNY"), "cyc-20260101", "CNY", "paid", day(time.January, 2, 1)},
		{derived("cyc-20260201", "CNY"), "cyc-20260201", "CNY", "paid", day(time.February, 2, 1)},
		{legacyPayoutID(t, legacyAt), "cyc-20260215", "USD", "paid", legacyAt},
		{derived("cyc-20260301", "CNY"), "cyc-20260301", "CNY", "created", day(time.March, 2, 1)},
		{derived("cyc-20260301", "USD"), "cyc-20260301", "USD", "created", tie},
		{derived("cyc-20260215", "CNY"), "cyc-20260215", "CNY", "created", tie},
		// cyc-20260201's USD settlement failed and was run again on 5 March:
		// the newest payout, its id among the oldest.
		{derived("cyc-20260201", "USD"), "cyc-20260201", "USD", "created", day(time.March, 5, 1)},
	}
	for _, p := range stored {
		if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
				tax_withheld, net, status, created_at, updated_at) values ($1, 'p-1', $2, $3, 100, 25, 15, 60, $4, $5, $5)`,
			p.id, p.cycle, p.currency, p.status, p.created); err != nil {
			t.Fatal(err)
		}
	}
	// Newest created first, ties by id, descending: computed from what was
	// stored, not from the listing.
	byCreation := func(status string) []string {
		ps := slices.Clone(stored)
		ps = slices.DeleteFunc(ps, func(p listedPayout) bool { return status != "" && p.status != status })
		slices.SortFunc(ps, func(a, b listedPayout) int {
			if c := b.created.Compare(a.created); c != 0 {
				return c
			}
			return strings.Compare(b.id, a.id)
		})
		ids := make([]string, len(ps))
		for i, p := range ps {
			ids[i] = p.id
		}
		return ids
	}
	as := auth.WithPrincipal(ctx, auth.Principal{Role: auth.RoleProvider, Subject: "p-1"})
	walk := func(status string) []string {
		var ids []string
		token := ""
		for range len(stored) + 1 {
			resp, err := srv.ListProviderPayouts(as, &payoutv1.ListProviderPayoutsRequest{ProviderId: "p-1", Status: status, PageSize: 2, PageToken: token})
			if err != nil {
				t.Fatalf("status %q, page after %d payouts: %v", status, len(ids), err)
			}
			for _, p := range resp.Payouts {
				ids = append(ids, p.PayoutId)
			}
			if token = resp.NextPageToken; token == "" {
				return ids
			}
		}
		t.Fatalf("status %q: listing did not end after %d pages", status, len(stored)+1)
		return nil
	}
	for _, status := range []string{"", "created"} {
		want := byCreation(status)
		if got := walk(status); !slices.Equal(got, want) {
			t.Errorf("status %q: listed\n  %v\nwant newest created first\n  %v", status, got, want)
		}
	}
	if want := derived("cyc-20260201", "USD"); byCreation("")[0] != want {
		t.Fatalf("guard: the late payout %s is not the newest stored", want)
	}

	// A token of the listing ordered by id alone: one value, the last id served.
	for _, status := range []string{"", "created"} {
		old := cursor.Encode(cursor.Scoped(payoutsListing, "p-1", "", status), stored[3].id)
		_, err := srv.ListProviderPayouts(as, &payoutv1.ListProviderPayoutsRequest{ProviderId: "p-1", Status: status, PageSize: 2, PageToken: old})
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != cursor.Field {
			t.Errorf("status %q: a page token of the listing by id answered %v; want a 400 on page_token", status, err)
		}
	}
}
